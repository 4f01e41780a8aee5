package cuda

import (
	"fmt"
	"os"
	"strings"
	"sync"
)

// driverLibrary is the driver's soname, as NVIDIA's installers place it.
// Tests point it at a fake driver.
var driverLibrary = "libcuda.so.1"

var (
	initOnce sync.Once
	initErr  error
)

// Init loads the NVIDIA driver (dlopen of libcuda.so.1 and dlsym of every
// function used) and calls cuInit(0). It runs once per process; later calls
// return the first result. Every constructor in this package calls it, so
// calling it first is only needed to learn early whether a GPU is usable.
//
// The error wraps ErrNoDriver when the library is missing or too old, or
// when cuInit reports no usable device; other cuInit failures are an *Error.
func Init() error {
	initOnce.Do(func() { initErr = initDriver(driverLibrary) })
	return initErr
}

// initDriver does Init's work for the library lib.
func initDriver(lib string) error {
	switch st, msg := cOpenDriver(lib); st {
	case 0:
	case 1:
		return &wrapped{
			msg:  fmt.Sprintf("%v (%s); GPU features need an NVIDIA driver", ErrNoDriver, withLib(lib, msg)),
			errs: []error{ErrNoDriver},
		}
	default:
		return &wrapped{
			msg:  fmt.Sprintf("%v (%s has no %s: the driver is too old); GPU features need a newer NVIDIA driver", ErrNoDriver, lib, msg),
			errs: []error{ErrNoDriver},
		}
	}
	if r := cInit(); r != 0 {
		e := newError("cuInit", int(r))
		switch e.Code {
		case cudaErrorNoDevice, cudaErrorStubLibrary, cudaErrorSystemNotReady,
			cudaErrorDriverMismatch, cudaErrorCompatNotSupp:
			return &wrapped{
				msg:  fmt.Sprintf("%v (%s); GPU features need an NVIDIA driver and GPU", ErrNoDriver, e.detail()),
				errs: []error{ErrNoDriver, e},
			}
		}
		return e
	}
	return nil
}

// DriverVersion returns the CUDA version the driver supports, as
// 1000*major + 10*minor (13000 for CUDA 13.0), from cuDriverGetVersion.
// It returns Init's error, or an *Error.
func DriverVersion() (int, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	v, r := cDriverGetVersion()
	if err := check("cuDriverGetVersion", r); err != nil {
		return 0, err
	}
	return v, nil
}

// DeviceCount returns the number of CUDA devices visible to the process
// (cuDeviceGetCount; CUDA_VISIBLE_DEVICES applies). It returns Init's
// error, or an *Error.
func DeviceCount() (int, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	n, r := cDeviceGetCount()
	if err := check("cuDeviceGetCount", r); err != nil {
		return 0, err
	}
	return n, nil
}

// Device describes one CUDA device.
type Device struct {
	// Ordinal is the device's index, 0 to DeviceCount()-1.
	Ordinal int
	// Name is the product name (cuDeviceGetName), e.g. "NVIDIA H200".
	Name string
	// Major and Minor are the compute capability (9 and 0 for an H200).
	Major, Minor int
	// TotalMem is the device memory in bytes (cuDeviceTotalMem).
	TotalMem uint64
}

// GetDevice describes the device of the given ordinal (cuDeviceGet,
// cuDeviceGetName, cuDeviceGetAttribute, cuDeviceTotalMem). It returns
// Init's error, or an *Error (CUDA_ERROR_INVALID_DEVICE for an ordinal out
// of range).
func GetDevice(ordinal int) (Device, error) {
	if err := Init(); err != nil {
		return Device{}, err
	}
	d, _, err := getDevice(ordinal)
	return d, err
}

// getDevice is GetDevice, also returning the CUdevice handle.
func getDevice(ordinal int) (Device, int32, error) {
	dev, r := cDeviceGet(ordinal)
	if err := check("cuDeviceGet", r); err != nil {
		return Device{}, 0, err
	}
	d := Device{Ordinal: ordinal}
	if d.Name, r = cDeviceGetName(dev); r != 0 {
		return Device{}, 0, check("cuDeviceGetName", r)
	}
	if d.Major, r = cDeviceGetAttribute(dev, cuAttrComputeCapMajor); r != 0 {
		return Device{}, 0, check("cuDeviceGetAttribute", r)
	}
	if d.Minor, r = cDeviceGetAttribute(dev, cuAttrComputeCapMinor); r != 0 {
		return Device{}, 0, check("cuDeviceGetAttribute", r)
	}
	if d.TotalMem, r = cDeviceTotalMem(dev); r != 0 {
		return Device{}, 0, check("cuDeviceTotalMem", r)
	}
	return d, dev, nil
}

// nvrtcEnv names a library to try before the usual NVRTC names.
const nvrtcEnv = "VIGIL_NVRTC_LIBRARY"

// nvrtcLibraries are the NVRTC names tried after $VIGIL_NVRTC_LIBRARY.
var nvrtcLibraries = []string{
	"libnvrtc.so.13",
	"libnvrtc.so.12",
	"libnvrtc.so",
	"/usr/local/cuda/lib64/libnvrtc.so.13",
	"/usr/local/cuda/lib64/libnvrtc.so.12",
}

var (
	nvrtcOnce sync.Once
	nvrtcErr  error
)

// loadNVRTC loads NVRTC once per process (not part of Init: a machine
// without NVRTC can still copy memory and run graphs).
func loadNVRTC() error {
	nvrtcOnce.Do(func() { nvrtcErr = openNVRTC(nvrtcCandidates()) })
	return nvrtcErr
}

// nvrtcCandidates is the NVRTC names to try, in order.
func nvrtcCandidates() []string {
	var names []string
	if env := os.Getenv(nvrtcEnv); env != "" {
		names = append(names, env)
	}
	return append(names, nvrtcLibraries...)
}

// openNVRTC tries each name in order and keeps the first that loads with
// every required symbol. The C side publishes a library's functions only on
// success, so failed candidates change nothing.
func openNVRTC(names []string) error {
	var whys []string
	for _, n := range names {
		st, msg := cOpenNVRTC(n)
		if st == 0 {
			return nil
		}
		whys = append(whys, msg)
	}
	return &wrapped{
		msg: fmt.Sprintf("%v (tried %s: %s); set %s to the path of libnvrtc.so",
			ErrNoNVRTC, strings.Join(names, ", "), strings.Join(whys, "; "), nvrtcEnv),
		errs: []error{ErrNoNVRTC},
	}
}

// NVRTCVersion loads NVRTC (see CompileModule) and returns its version
// (nvrtcVersion), e.g. 13, 0. It returns an error wrapping ErrNoNVRTC when
// no NVRTC library loads, or an *NVRTCError.
func NVRTCVersion() (major, minor int, err error) {
	if err := loadNVRTC(); err != nil {
		return 0, 0, err
	}
	major, minor, r := cNVRTCVersion()
	if r != 0 {
		return 0, 0, nvrtcError("nvrtcVersion", r, "")
	}
	return major, minor, nil
}

// withLib prefixes a dlerror text with the library name unless it already
// starts with it (glibc's does: "libcuda.so.1: cannot open ...").
func withLib(lib, msg string) string {
	if strings.HasPrefix(msg, lib) {
		return msg
	}
	return lib + ": " + msg
}
