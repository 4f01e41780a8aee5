package client

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/vigil-video/vigil/internal/cluster"
)

// NodeList is the body of GET /v1/nodes as the client reads it.
type NodeList struct {
	Nodes []cluster.NodeStatus `json:"nodes"`
}

// PrintNodes writes the fleet's nodes as a table (format "table": id,
// streams, load and capacity in megapixels per second, GPUs, version,
// lease age, role) or as JSON (the API's objects).
func PrintNodes(w io.Writer, format string, l NodeList) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if l.Nodes == nil {
			l.Nodes = []cluster.NodeStatus{}
		}
		return enc.Encode(l.Nodes)
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTREAMS\tLOAD MPX/S\tCAPACITY MPX/S\tGPUS\tVERSION\tLEASE AGE\tROLE\tHOST\tSTREAM IDS")
	for _, n := range l.Nodes {
		role := "-"
		switch {
		case n.Draining:
			role = "draining"
		case n.Leader:
			role = "leader"
		}
		ids := make([]string, 0, len(n.Streams))
		for id := range n.Streams {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%d\t%s\t%s\t%s\t%s\t%s\n", n.ID, len(n.Streams), n.Load/1e6, n.Capacity.Effective()/1e6,
			n.Capacity.GPUs, n.Version, fmt.Sprintf("%.1f s", n.LeaseAge.Seconds()), role, n.Host, strings.Join(ids, ","))
	}
	return tw.Flush()
}
