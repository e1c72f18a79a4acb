//go:build !linux

package main

import (
	"context"
	"errors"
	"time"
)

func measureLate(context.Context, time.Duration, time.Duration, time.Duration) ([][]interval, bool, time.Duration, error) {
	return nil, false, 0, errors.New("only on Linux")
}
