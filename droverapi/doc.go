// Package droverapi holds the JSON types of drover's HTTP API, defined
// once: the server (drover server --listen) encodes them, the Go client
// (droverclient) decodes them, and the drover command line prints what
// they carry. It also holds the webhook signature scheme, Standard
// Webhooks with a key per destination (SignWebhook, VerifyWebhook,
// WebhookSecret), and the body of a webhook request (WebhookPayload),
// shared by the webhook dispatcher and receivers written in Go.
//
// Each type is named as its schema in the OpenAPI document the server
// serves at /openapi.json (Task, Step, SubmitRequest, Lease, …); a test of
// the server checks that every schema property is a JSON field of its
// type and every JSON field a property of its schema.
//
// Durations on the wire are integer milliseconds (fields ending in _ms),
// times RFC 3339, and free JSON (task input and output, message bodies)
// json.RawMessage. Request fields that are pointers are optional: nil is
// left out of the body, and the server tells a missing field from a zero
// one.
//
// The package imports only the standard library.
package droverapi
