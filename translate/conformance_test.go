package translate

import (
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// chunkReader returns its bytes in pieces of random size, so that lines
// and UTF-8 characters are split across reads.
type chunkReader struct {
	r randSource
	b []byte
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := 1 + c.r.IntN(min(len(c.b), len(p), 4096))
	copy(p, c.b[:n])
	c.b = c.b[n:]
	return n, nil
}

// checkGenerated generates one upstream answer, translates it and checks
// the client stream: valid by the client's rules, and saying what the
// upstream said.
func checkGenerated(r randSource, from, to Protocol) (a *genAnswer, out []byte, err error) {
	a = genScript(r, from)
	a.render(r, from)
	out, err = runStream(from, to, &chunkReader{r: r, b: a.stream}, StreamOptions{IncludeUsage: true, Created: 1})
	if err != nil {
		return a, out, fmt.Errorf("translation: %w", err)
	}
	got, err := validateStream(to, out, validateOpts{strictArgs: true, usageChunk: true})
	if err != nil {
		return a, out, err
	}
	if a.failed {
		if !got.Error {
			return a, out, fmt.Errorf("the upstream failed, the client saw no error")
		}
		return a, out, nil
	}
	if got.Error {
		return a, out, fmt.Errorf("the client saw an error the upstream did not send")
	}
	want := a.expect(from, to)
	for i := range got.Tools {
		got.Tools[i].ID = ""
		got.Tools[i].Args = normJSONString(got.Tools[i].Args)
	}
	for i := range want.Tools {
		want.Tools[i].Args = normJSONString(want.Tools[i].Args)
	}
	got.ErrorCode = ""
	for i, sig := range got.Signatures {
		// A Messages client's signature carries the upstream's whole
		// reasoning item; compare its encrypted_content.
		if _, enc, ok, err := openAIItem(sig, "signature"); ok {
			if err != nil {
				return a, out, err
			}
			got.Signatures[i] = enc
		}
	}
	if !reflect.DeepEqual(got, want) {
		return a, out, fmt.Errorf("the client learned\n%+v\nthe upstream said\n%+v", got, want)
	}
	return a, out, nil
}

// TestStreamProperty: generated upstream streams, in every event order
// their protocol allows (parallel tool calls interleaved, blocks split
// anywhere, reads split anywhere), translate in every direction into
// client streams that are valid by the client protocol's own rules and
// carry the same text, reasoning, calls, finish and usage.
//
// With -dump-streams DIR it also writes every client stream it checked into
// DIR (stream-gen-<from>-<seed>.to-<client>.sse), for the Node SDKs to read
// (make sdk-node).
func TestStreamProperty(t *testing.T) {
	n := 400
	if testing.Short() {
		n = 60
	}
	for _, from := range protocols {
		for _, to := range protocols {
			if from == to {
				continue
			}
			t.Run(from.String()+"-to-"+to.String(), func(t *testing.T) {
				for i := range n {
					r := rand.New(rand.NewPCG(uint64(i), uint64(from)<<8|uint64(to)))
					a, out, err := checkGenerated(r, from, to)
					if err != nil {
						t.Fatalf("seed %d: %v\n--- upstream\n%s\n--- client\n%s", i, err, clip(a.stream), clip(out))
					}
					if *dumpStreams != "" {
						name := fmt.Sprintf("stream-gen-%s-%d.to-%s.sse", from, i, to)
						if err := os.WriteFile(filepath.Join(*dumpStreams, name), out, 0o644); err != nil {
							t.Fatal(err)
						}
					}
				}
			})
		}
	}
}

var dumpStreams = flag.String("dump-streams", "", "write the client streams TestStreamProperty checked into this directory")

// clip shortens a long stream for a failure message.
func clip(b []byte) []byte {
	if len(b) > 20000 {
		return append(b[:20000:20000], "…"...)
	}
	return b
}
