package upstream

import (
	"os"
	"os/exec"
	"testing"
)

// suiteEnv names the client mode the package's tests run under: unset (or
// "auto") is ClientAuto, so the tests' http:// servers are reached through
// fasthttp; "nethttp" runs the same tests through net/http.
// TestSuiteOnNetHTTP sets it to run the whole suite a second time.
const suiteEnv = "TROUPE_TEST_UPSTREAM_CLIENT"

// suiteClientMode is the mode mustNew gives a transport whose test asked for
// ClientAuto.
var suiteClientMode ClientMode

func TestMain(m *testing.M) {
	mode, err := ParseClientMode(os.Getenv(suiteEnv))
	if err != nil {
		panic(err)
	}
	suiteClientMode = mode
	os.Exit(m.Run())
}

// TestSuiteOnNetHTTP runs this package's tests again with every transport
// on net/http (the suite itself runs on fasthttp for http:// servers), so
// that both clients pass the same tests: timeouts, cancellation, error
// classes, headers, streaming.
func TestSuiteOnNetHTTP(t *testing.T) {
	if os.Getenv(suiteEnv) != "" {
		t.Skip("already the second run")
	}
	if testing.Short() {
		t.Skip("the second run of the suite is not short")
	}
	args := []string{"-test.count=1", "-test.run", "^Test", "-test.skip", "^TestSuiteOnNetHTTP$"}
	if testing.Verbose() {
		args = append(args, "-test.v")
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), suiteEnv+"=nethttp")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the suite on net/http failed: %v\n%s", err, out)
	}
}
