package testutil

import "github.com/magnetar-io/magnetar/internal/testca"

// CA is a certificate authority made in a test (internal/testca).
type CA = testca.CA

// NewCA makes an authority named name (testca.NewCA).
var NewCA = testca.NewCA
