package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// checkDecodeErr: a decoder error is always an *apiError with a 4xx status,
// a code and a message.
func checkDecodeErr(t *testing.T, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v (%T) is not an API error", err, err)
	}
	if ae.status < 400 || ae.status >= 500 || ae.code == "" || ae.message == "" {
		t.Fatalf("error %+v", ae)
	}
}

func FuzzDecodeSubmit(f *testing.F) {
	for _, s := range []string{
		`{"workflow":"orders","input":{"order_id":"o-1","amount":5}}`,
		`{"workflow":"echo","id":"t-1","ordering_key":"k","input":null}`,
		`{"workflow":5}`, `{"Workflow":"x"}`, `{} {}`, `[]`, `{"workflow":"a/b"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := DecodeSubmit(b)
		if err != nil {
			checkDecodeErr(t, err)
			return
		}
		if req.Workflow == "" || checkName("workflow", req.Workflow) != nil || (req.ID != "" && checkName("id", req.ID) != nil) {
			t.Fatalf("accepted an invalid request: %+v", req)
		}
		if !json.Valid(req.Input) {
			t.Fatalf("input is not JSON: %q", req.Input)
		}
		// What was accepted re-encodes to something accepted alike.
		again, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		req2, err := DecodeSubmit(again)
		if err != nil {
			t.Fatalf("re-encoded request refused: %v: %s", err, again)
		}
		if req2.Workflow != req.Workflow || req2.ID != req.ID || req2.OrderingKey != req.OrderingKey {
			t.Fatalf("round trip: %+v vs %+v", req, req2)
		}
		var c1, c2 bytes.Buffer
		if json.Compact(&c1, req.Input) != nil || json.Compact(&c2, req2.Input) != nil || c1.String() != c2.String() {
			t.Fatalf("input round trip: %s vs %s", req.Input, req2.Input)
		}
	})
}

func FuzzDecodePublish(f *testing.F) {
	for _, s := range []string{
		`{"session_id":"s","body":{"a":1},"message_id":"m","end_of_sequence":true,"not_before":"2030-01-01T00:00:00Z"}`,
		`{"messages":[{"session_id":"s","body":1},{"session_id":"t","body":"x"}]}`,
		`{"messages":[]}`, `{"session_id":"s"}`, `{"session_id":5,"body":1}`, `{"not_before":"x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ms, err := DecodePublish(b)
		if err != nil {
			checkDecodeErr(t, err)
			return
		}
		if len(ms) == 0 || len(ms) > maxBatch {
			t.Fatalf("%d messages accepted", len(ms))
		}
		for _, m := range ms {
			if checkSession(m.SessionID) != nil || !json.Valid(m.Body) || len(m.MessageID) > 256 {
				t.Fatalf("accepted an invalid message: %+v", m)
			}
		}
	})
}
