// Package hwmon exports NVIDIA GPU metrics through NVML (go-nvml, which
// loads libnvidia-ml.so.1 at run time): utilisation, memory used and total,
// SM clock, NVDEC decoder utilisation and temperature, per GPU. On a machine
// without an NVIDIA driver it logs one info line and exports nothing; NVML
// is never called after a failed nvmlInit (that crashes the process).
package hwmon

import (
	"strconv"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// Collector is a prometheus.Collector over NVML. Create it with Start; it
// is nil-safe to Close.
type Collector struct {
	mu      sync.Mutex
	closed  bool
	devices []nvml.Device
	names   []string

	util, memUsed, memTotal, smClock, decUtil, temp *prometheus.Desc
}

// Start initialises NVML. When that fails (no driver, no GPU) it logs one
// info line and returns nil: nothing is exported and NVML is not touched
// again. Otherwise it returns a collector to register; Close shuts NVML
// down.
func Start(log *zap.Logger) *Collector {
	if ret := nvml.Init(); ret != nvml.SUCCESS {
		log.Info("no NVIDIA GPU metrics: NVML unavailable", zap.String("nvml", nvml.ErrorString(ret)))
		return nil
	}
	n, ret := nvml.DeviceGetCount()
	if ret != nvml.SUCCESS || n == 0 {
		log.Info("no NVIDIA GPU metrics: no device", zap.String("nvml", nvml.ErrorString(ret)))
		_ = nvml.Shutdown()
		return nil
	}
	c := &Collector{}
	for i := 0; i < n; i++ {
		d, ret := nvml.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		name, _ := d.GetName()
		c.devices = append(c.devices, d)
		c.names = append(c.names, name)
	}
	labels := []string{"gpu", "name"}
	c.util = prometheus.NewDesc("vigil_gpu_utilization_ratio", "GPU utilisation (time a kernel ran) over NVML's sample period, 0..1.", labels, nil)
	c.memUsed = prometheus.NewDesc("vigil_gpu_memory_used_bytes", "GPU memory in use.", labels, nil)
	c.memTotal = prometheus.NewDesc("vigil_gpu_memory_total_bytes", "GPU memory in total.", labels, nil)
	c.smClock = prometheus.NewDesc("vigil_gpu_sm_clock_hertz", "Current SM clock.", labels, nil)
	c.decUtil = prometheus.NewDesc("vigil_gpu_decoder_utilization_ratio", "NVDEC utilisation, 0..1.", labels, nil)
	c.temp = prometheus.NewDesc("vigil_gpu_temperature_celsius", "GPU core temperature.", labels, nil)
	log.Info("NVIDIA GPU metrics enabled", zap.Int("gpus", len(c.devices)), zap.Strings("names", c.names))
	return c
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.util, c.memUsed, c.memTotal, c.smClock, c.decUtil, c.temp} {
		ch <- d
	}
}

// Collect implements prometheus.Collector; a reading NVML refuses is left
// out rather than reported as zero.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	for i, d := range c.devices {
		lv := []string{strconv.Itoa(i), c.names[i]}
		g := func(desc *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, lv...)
		}
		if u, ret := d.GetUtilizationRates(); ret == nvml.SUCCESS {
			g(c.util, float64(u.Gpu)/100)
		}
		if m, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
			g(c.memUsed, float64(m.Used))
			g(c.memTotal, float64(m.Total))
		}
		if mhz, ret := d.GetClockInfo(nvml.CLOCK_SM); ret == nvml.SUCCESS {
			g(c.smClock, float64(mhz)*1e6)
		}
		if u, _, ret := d.GetDecoderUtilization(); ret == nvml.SUCCESS {
			g(c.decUtil, float64(u)/100)
		}
		if t, ret := d.GetTemperature(nvml.TEMPERATURE_GPU); ret == nvml.SUCCESS {
			g(c.temp, float64(t))
		}
	}
}

// Close shuts NVML down; safe on a nil collector and idempotent.
func (c *Collector) Close() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		_ = nvml.Shutdown()
	}
}
