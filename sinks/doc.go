// Package sinks delivers detection results: to NATS (one JSON message per
// processed frame on <prefix>.<stream_id>.detections, with header
// Nats-Msg-Id: <stream_id>/<epoch>/<seq> for JetStream de-duplication,
// unique across restarts) or as JSON lines to a writer (vigil detect). Both
// use the same message, Message, whose JSON Schema is SchemaJSON
// (docs/schema.md describes it).
package sinks
