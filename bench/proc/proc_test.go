package proc

import (
	"os"
	"runtime"
	"testing"
)

func TestReadSelf(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	s, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if s.RSSBytes <= 0 || s.CPUSeconds < 0 {
		t.Fatalf("%+v", s)
	}
	if _, err := Read(1 << 30); err == nil {
		t.Fatal("no error for a process that does not exist")
	}
}
