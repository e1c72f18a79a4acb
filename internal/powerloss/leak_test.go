package powerloss

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/magnetar-io/magnetar/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testutil.GoleakIgnores()...) }
