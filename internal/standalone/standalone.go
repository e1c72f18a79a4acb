// Package standalone runs a whole Magnetar cluster in one process, for a
// laptop or a test: an embedded etcd and bookies (and, with issue 3, a
// broker), all under one data directory.
package standalone

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"

	"go.uber.org/zap"

	"github.com/magnetar-io/magnetar/bookie"
	"github.com/magnetar-io/magnetar/metastore"
)

// Config of a standalone cluster.
type Config struct {
	// DataDir holds everything: metastore/ and bookie-<i>/. Default ./data.
	DataDir string `mapstructure:"data-dir"`
	// Bookies is how many bookies to run. Default 1.
	Bookies int `mapstructure:"bookies"`
	// MetastoreListen is the embedded etcd's client address. Default
	// 127.0.0.1:2379.
	MetastoreListen string `mapstructure:"metastore-listen"`
	// BookieListen is the first bookie's address; bookie i listens on
	// port+i (port 0: every bookie on a free port). Default 127.0.0.1:3181.
	BookieListen string `mapstructure:"bookie-listen"`
	// MaxEntrySize for the bookies. Default 5 MiB.
	MaxEntrySize int `mapstructure:"max-entry-size"`
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		DataDir:         "./data",
		Bookies:         1,
		MetastoreListen: "127.0.0.1:2379",
		BookieListen:    "127.0.0.1:3181",
		MaxEntrySize:    bookie.DefaultConfig().MaxEntrySize,
	}
}

// MaxBookies bounds Config.Bookies.
const MaxBookies = 16

// Validate checks the configuration.
func (c *Config) Validate() error {
	var errs []error
	if c.DataDir == "" {
		errs = append(errs, errors.New("data directory is empty"))
	}
	if c.Bookies < 1 || c.Bookies > MaxBookies {
		errs = append(errs, fmt.Errorf("bookies %d must be in 1..%d", c.Bookies, MaxBookies))
	}
	if _, _, err := net.SplitHostPort(c.MetastoreListen); err != nil {
		errs = append(errs, fmt.Errorf("metastore listen address %q: %v", c.MetastoreListen, err))
	}
	if _, port, err := net.SplitHostPort(c.BookieListen); err != nil {
		errs = append(errs, fmt.Errorf("bookie listen address %q: %v", c.BookieListen, err))
	} else if p, err := strconv.Atoi(port); err != nil || p < 0 || p+c.Bookies > 65536 {
		errs = append(errs, fmt.Errorf("bookie listen port %q: not a usable port for %d bookies", port, c.Bookies))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("standalone config: %w", err)
	}
	return nil
}

// Standalone is a running single-process cluster.
type Standalone struct {
	Etcd    *metastore.Embedded
	Store   *metastore.Store
	Bookies []*bookie.Server
	log     *zap.Logger
}

// Start starts etcd, then the bookies. On error everything started is
// stopped again.
func Start(ctx context.Context, cfg Config, log *zap.Logger) (_ *Standalone, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	s := &Standalone{log: log}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	s.Etcd, err = metastore.StartEmbedded(ctx, metastore.EmbeddedConfig{
		Dir:        filepath.Join(cfg.DataDir, "metastore"),
		ClientAddr: cfg.MetastoreListen,
		Logger:     log,
	})
	if err != nil {
		return nil, err
	}
	s.Store, err = metastore.Open(ctx, metastore.Config{Endpoints: s.Etcd.Endpoints()}, log)
	if err != nil {
		return nil, err
	}
	host, portStr, _ := net.SplitHostPort(cfg.BookieListen)
	port, _ := strconv.Atoi(portStr)
	for i := 0; i < cfg.Bookies; i++ {
		bc := bookie.DefaultConfig()
		bc.ID = fmt.Sprintf("standalone-bookie-%d", i)
		bc.Listen = net.JoinHostPort(host, "0")
		if port != 0 {
			bc.Listen = net.JoinHostPort(host, strconv.Itoa(port+i))
		}
		bc.DataDir = filepath.Join(cfg.DataDir, fmt.Sprintf("bookie-%d", i))
		bc.Metastore = s.Etcd.Endpoints()
		bc.MaxEntrySize = cfg.MaxEntrySize
		b, err := bookie.Start(ctx, bc, bookie.WithStore(s.Store), bookie.WithLogger(log.Named(bc.ID)))
		if err != nil {
			return nil, err
		}
		s.Bookies = append(s.Bookies, b)
	}
	return s, nil
}

// Close stops the bookies, then etcd.
func (s *Standalone) Close() error {
	var errs []error
	for i := len(s.Bookies) - 1; i >= 0; i-- {
		errs = append(errs, s.Bookies[i].Close())
	}
	s.Bookies = nil
	if s.Store != nil {
		errs = append(errs, s.Store.Close())
		s.Store = nil
	}
	if s.Etcd != nil {
		s.Etcd.Close()
		s.Etcd = nil
	}
	return errors.Join(errs...)
}
