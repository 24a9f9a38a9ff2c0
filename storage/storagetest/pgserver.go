package storagetest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgresServer is a private PostgreSQL server (initdb, pg_ctl) in a
// temporary directory, on a free port of 127.0.0.1, for tests that stop
// and restart the database; it never touches the machine's own server.
// Its data survive Stop and Start. Start must be called from the test's
// goroutine (it fails the test); Stop may be called from any.
type PostgresServer struct {
	t    testing.TB
	bin  string // directory of initdb, pg_ctl
	dir  string // owns data/ and log
	port int
	cred *syscall.Credential // the user the server runs as when the test runs as root
	mu   sync.Mutex
	up   bool
}

// pgBinDir finds the directory of pg_ctl: PATH, else the newest
// /usr/lib/postgresql/*/bin.
func pgBinDir() (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		return filepath.Dir(p), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("pg_ctl not on PATH nor in /usr/lib/postgresql/*/bin")
}

// StartPostgres creates a database cluster in a temporary directory and
// starts its server; the server is stopped and the directory removed when
// t ends. Without the PostgreSQL server binaries t is skipped, or fails
// when TROUPE_REQUIRE_SERVICES=1. PostgreSQL refuses to run as root: a
// root test runs it as the user "postgres" (or "nobody").
func StartPostgres(t testing.TB) *PostgresServer {
	t.Helper()
	bin, err := pgBinDir()
	if err != nil {
		if os.Getenv("TROUPE_REQUIRE_SERVICES") == "1" {
			t.Fatalf("PostgreSQL server binaries required (TROUPE_REQUIRE_SERVICES=1): %v", err)
		}
		t.Skipf("PostgreSQL server binaries not installed: %v", err)
	}
	dir, err := os.MkdirTemp("", "troupe-pg-")
	if err != nil {
		t.Fatal(err)
	}
	s := &PostgresServer{t: t, bin: bin, dir: dir, port: freePort(t)}
	t.Cleanup(func() {
		s.Stop()
		os.RemoveAll(dir)
	})
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			u, err = user.Lookup("nobody")
		}
		if err != nil {
			t.Fatalf("running as root and no user to run PostgreSQL as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := s.run("initdb", "-D", s.data(), "-U", "troupe", "--auth=trust", "-E", "UTF8", "--no-sync"); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	s.Start()
	return s
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func (s *PostgresServer) data() string { return filepath.Join(s.dir, "data") }

// run runs one of the server's programs as the server's user.
func (s *PostgresServer) run(name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	cmd.Env = []string{"PATH=" + s.bin + ":/usr/bin:/bin", "LC_ALL=C"}
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	return cmd.CombinedOutput()
}

// URL is a postgres:// URL of the server's "postgres" database.
func (s *PostgresServer) URL() string {
	return "postgres://troupe@127.0.0.1:" + strconv.Itoa(s.port) + "/postgres?sslmode=disable"
}

// Start starts the server (again, after Stop) and waits until it accepts
// connections.
func (s *PostgresServer) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.up {
		return
	}
	opts := fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c fsync=off -c max_connections=200", s.port)
	if out, err := s.run("pg_ctl", "start", "-w", "-t", "60", "-D", s.data(), "-l", filepath.Join(s.dir, "log"), "-o", opts); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "log"))
		s.t.Fatalf("pg_ctl start: %v\n%s\n%s", err, out, log)
	}
	s.up = true
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		c, err := pgx.Connect(ctx, s.URL())
		if err == nil {
			c.Close(ctx)
			return
		}
		if ctx.Err() != nil {
			s.t.Fatalf("PostgreSQL on port %d not accepting connections: %v", s.port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop stops the server at once (pg_ctl -m immediate: connections are cut,
// as when the database crashes) and waits for it to exit. It does nothing
// when the server is not running.
func (s *PostgresServer) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.up {
		return
	}
	if out, err := s.run("pg_ctl", "stop", "-w", "-t", "60", "-m", "immediate", "-D", s.data()); err != nil {
		s.t.Errorf("pg_ctl stop: %v\n%s", err, out)
	}
	s.up = false
}
