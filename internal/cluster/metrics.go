package cluster

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the node's collectors, per node (the wiring adds the node
// label):
//
//   - vigil_cluster_leases: stream leases held now;
//   - vigil_cluster_leader: 1 while this node places streams for the fleet;
//   - vigil_cluster_lease_operations_total{op,result}: bucket writes by op
//     (take, renew, grant, handover, release, heartbeat) and result (ok,
//     conflict, error);
//   - vigil_cluster_leases_lost_total: leases lost without handing the
//     stream over (not renewed in time, or taken by another node);
//   - vigil_cluster_handoffs_total: streams handed to another node;
//   - vigil_cluster_moves_total: moves asked by this node as placer;
//   - vigil_cluster_expiries_seen_total: leases seen deleted or expired;
//   - vigil_cluster_cas_retries_total: compare-and-sets asked again after
//     the server refused them while the key's previous write was still
//     being applied (Node.update).
type metrics struct {
	held, leader                            prometheus.Gauge
	ops                                     *prometheus.CounterVec
	lost, handoffs, moves, expired, retries prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		held:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "vigil_cluster_leases", Help: "Stream leases this node holds."}),
		leader:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "vigil_cluster_leader", Help: "1 while this node places streams for the fleet."}),
		ops:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vigil_cluster_lease_operations_total", Help: "Lease bucket writes by op (take, renew, grant, handover, release, heartbeat) and result (ok, conflict, error)."}, []string{"op", "result"}),
		lost:     prometheus.NewCounter(prometheus.CounterOpts{Name: "vigil_cluster_leases_lost_total", Help: "Leases lost without a handover: not renewed in time, or taken by another node."}),
		handoffs: prometheus.NewCounter(prometheus.CounterOpts{Name: "vigil_cluster_handoffs_total", Help: "Streams handed over to another node (drain, rebalancing)."}),
		moves:    prometheus.NewCounter(prometheus.CounterOpts{Name: "vigil_cluster_moves_total", Help: "Stream moves asked by this node while placing for the fleet."}),
		expired:  prometheus.NewCounter(prometheus.CounterOpts{Name: "vigil_cluster_expiries_seen_total", Help: "Stream leases seen released or expired."}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{Name: "vigil_cluster_cas_retries_total",
			Help: "Lease compare-and-sets asked again because the server refused them while the key's previous write was still being applied."}),
	}
	if reg != nil {
		reg.MustRegister(m.held, m.leader, m.ops, m.lost, m.handoffs, m.moves, m.expired, m.retries)
	}
	return m
}

// op counts one bucket write.
func (m *metrics) op(op string, err error) {
	result := "ok"
	switch {
	case err == nil:
	case isConflict(err):
		result = "conflict"
	default:
		result = "error"
	}
	m.ops.WithLabelValues(op, result).Inc()
}
