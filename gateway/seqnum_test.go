package gateway

import (
	"os"
	"testing"

	"github.com/tidwall/gjson"
)

// seqNumberSeeds are events whose sequence_number the direct read takes,
// and shapes it must leave to gjson.
var seqNumberSeeds = []string{
	`{"type":"response.created","sequence_number":0,"response":{}}`,
	`{"type":"x","sequence_number":13}`, `{"type":"x","sequence_number":123456789012345678}`,
	`{"type":"x","sequence_number":1234567890123456789}`, `{"type":"x","sequence_number":99999999999999999999}`,
	`{"type":"x","sequence_number":-1}`, `{"type":"x","sequence_number":1.5}`, `{"type":"x","sequence_number":1e3}`,
	`{"type":"x","sequence_number":007,"a":1}`, `{"type":"x","sequence_number":"7"}`, `{"type":"x","sequence_number":7`,
	`{"type":"x","sequence_number": 7}`, `{"type":"x\"","sequence_number":7}`, `{"type":"x\\","sequence_number":7}`,
	`{"type":"x","sequence_number":null}`, `{"type":"x","sequence_number":7 }`, `{"type":"x","sequence_number":7]`,
	`{"sequence_number":3,"type":"x"}`, `{"type":"x"}`, `{"type":"x",`, `{"type":"`, `{"type":1,"sequence_number":2}`,
	`{"type":"x","sequence_numbers":2,"sequence_number":5}`, `{"type":"x","sequence_number":2,"sequence_number":5}`,
	`{"type":"x","sequence_number":12abc}`, ``, `{`, `[1]`, `{"type":"x","sequence_number":}`,
}

// checkSequenceNumber fails t when sequenceNumber differs from gjson's
// read of data, or the direct read takes a number gjson does not read.
func checkSequenceNumber(t *testing.T, data []byte) {
	t.Helper()
	r := gjson.GetBytes(data, "sequence_number")
	want, wantOK := r.Int(), r.Type == gjson.Number
	if n, ok := leadingSequenceNumber(data); ok && (!wantOK || n != want) {
		t.Fatalf("leadingSequenceNumber(%q) = %d, gjson %d (number %v)", data, n, want, wantOK)
	}
	if n, ok := sequenceNumber(data); ok != wantOK || (ok && n != want) {
		t.Fatalf("sequenceNumber(%q) = %d %v, gjson %d %v", data, n, ok, want, wantOK)
	}
}

// TestSequenceNumber: sequenceNumber reads what gjson reads in every event
// of the captured Responses stream (each read directly) and in the seeds.
func TestSequenceNumber(t *testing.T) {
	body, err := os.ReadFile("testdata/responses-stream-text.sse")
	if err != nil {
		t.Fatal(err)
	}
	for _, data := range responsesEventData(t, body) {
		if _, ok := leadingSequenceNumber(data); !ok {
			t.Errorf("%.60q: not read directly", data)
		}
		checkSequenceNumber(t, data)
	}
	for _, s := range seqNumberSeeds {
		checkSequenceNumber(t, []byte(s))
	}
	if n, ok := leadingSequenceNumber([]byte(`{"type":"x","sequence_number":123456789012345678}`)); !ok || n != 123456789012345678 {
		t.Errorf("18 digits: %d %v", n, ok)
	}
}

// FuzzSequenceNumber checks sequenceNumber, and any number the direct read
// takes, against gjson on any bytes.
func FuzzSequenceNumber(f *testing.F) {
	for _, s := range seqNumberSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkSequenceNumber(t, data) })
}
