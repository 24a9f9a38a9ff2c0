package load

import (
	"bufio"
	"bytes"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/bench/scenario"
)

// FuzzReadStream: any body read as a Chat or Responses SSE stream either
// completes (with a TTFT) or fails with an error; never a panic or a hang.
func FuzzReadStream(f *testing.F) {
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: [DONE]\n\n"), false)
	f.Add([]byte("event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\n\nevent: response.completed\ndata: {\"type\":\"response.completed\"}\n\n"), true)
	f.Add([]byte("data: [DONE]\n\n"), false)
	f.Fuzz(func(t *testing.T, body []byte, responses bool) {
		api := scenario.Chat
		if responses {
			api = scenario.Responses
		}
		var res Result
		err := readStream(bufio.NewReaderSize(bytes.NewReader(body), 64), api, time.Now(), &res)
		if err == nil && res.TTFT == 0 {
			t.Fatal("a stream without content counted as complete")
		}
	})
}
