package testutil

import (
	"os"

	"github.com/magnetar-io/magnetar/internal/wirecodec"
)

// PoisonReleased makes this process, and the magnetar processes it
// starts, overwrite every payload buffer handed back to the pool
// (internal/wirecodec): a buffer handed back while still in use then
// shows as corrupt data or a checksum failure instead of going unseen.
// Call it from TestMain, before any server starts.
func PoisonReleased() {
	if err := os.Setenv(wirecodec.PoisonEnv, "1"); err != nil {
		panic(err)
	}
}
