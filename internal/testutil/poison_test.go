package testutil

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/magnetar-io/magnetar/internal/wirecodec"
)

// PoisonReleased poisons a test run and not a benchmark run: this test
// binary is run again, once with -test.bench and once without, and
// reports what PoisonReleased set.
func TestPoisonReleasedNotWhenBenchmarking(t *testing.T) {
	if os.Getenv("POISON_HELPER") == "1" {
		PoisonReleased()
		os.Stdout.WriteString("poison=" + os.Getenv(wirecodec.PoisonEnv) + "\n")
		return
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "poison=1"},
		{[]string{"-test.bench=NothingMatches"}, "poison="},
	} {
		cmd := exec.Command(os.Args[0], append([]string{"-test.run=^TestPoisonReleasedNotWhenBenchmarking$", "-test.v"}, tc.args...)...)
		cmd.Env = append(os.Environ(), "POISON_HELPER=1", wirecodec.PoisonEnv+"=")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", tc.args, err, out)
		}
		if !strings.Contains(string(out), tc.want+"\n") {
			t.Errorf("with %v: want %q in\n%s", tc.args, tc.want, out)
		}
	}
}
