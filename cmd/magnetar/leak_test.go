package main

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/magnetar-io/magnetar/internal/testutil"
)

func TestMain(m *testing.M) {
	testutil.PoisonReleased()
	goleak.VerifyTestMain(m, testutil.GoleakIgnores()...)
}
