// Package client is the command-line side of a running vigil: Client
// calls its REST API (`vigil streams`, `vigil shapes`) and PrintStreams
// writes the answers as tables or JSON; Tail (`vigil tail`) prints what it
// publishes on NATS. Nothing here runs a pipeline.
package client
