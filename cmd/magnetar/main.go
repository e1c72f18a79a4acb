// Command magnetar is Magnetar's single binary: every daemon and tool is a
// subcommand (standalone, bookie, version, ...). Run `magnetar --help`.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/magnetar-io/magnetar/internal/bufpool"
	"github.com/magnetar-io/magnetar/internal/bytesize"
	"github.com/magnetar-io/magnetar/internal/logging"
	"github.com/magnetar-io/magnetar/internal/ops"
	"github.com/magnetar-io/magnetar/internal/tlsutil"
)

// gRPC's buffers come from a pool that does not clear them (see bufpool).
func init() { bufpool.Install() }

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// globals are the flags every command takes.
type globals struct {
	config    string
	logLevel  string
	logFormat string
}

func (g *globals) logger() (*zap.Logger, error) { return logging.New(g.logLevel, g.logFormat) }

func newRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "magnetar",
		Short:         "Magnetar: a messaging and streaming platform with separate compute and storage",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.config, "config", "", "YAML file with the command's settings (keys are flag names)")
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	root.PersistentFlags().StringVar(&g.logFormat, "log-format", "console", "log format: console or json")
	root.AddCommand(newStandaloneCmd(g), newBookieCmd(g), newAutorecoveryCmd(g), newAutoscalerCmd(g), newBrokerCmd(g), newClientCmd(g), newAdminCmd(g), newPerfCmd(g), newTokensCmd(), newVersionCmd())
	return root
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The first signal asks the command to stop cleanly (which may wait,
	// for example for a producer's pending sends); a second one kills.
	context.AfterFunc(ctx, stop)
	if err := newRoot().ExecuteContext(ctx); err != nil {
		if !errors.Is(err, context.Canceled) {
			fmt.Fprintf(os.Stderr, "magnetar: %v\n", err)
		}
		stop()
		os.Exit(1)
	}
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "magnetar", version)
		},
	}
}

// serveOps serves the operational endpoints (health, metrics, profiles
// if asked) on addr for a process with no other HTTP port; stop ends the
// server and waits for it.
// httpTLS is the TLS of a helper process's --http port (autorecovery,
// autoscaler): PEM files, reloaded when they change.
type httpTLS struct {
	TLSCertFile string `mapstructure:"tls-cert-file"`
	TLSKeyFile  string `mapstructure:"tls-key-file"`
}

func (h httpTLS) check() error {
	if (h.TLSCertFile == "") != (h.TLSKeyFile == "") {
		return errors.New("TLS of the --http port needs both --tls-cert-file and --tls-key-file")
	}
	return nil
}

func addHTTPTLSFlags(f *pflag.FlagSet) {
	f.String("tls-cert-file", "", "serve the --http port over TLS with this certificate (PEM; reloaded when it changes)")
	f.String("tls-key-file", "", "the certificate's private key (PEM)")
}

func serveOps(addr string, tf httpTLS, o ops.Options) (bound string, stop func(), err error) {
	var ts *tlsutil.Server
	if tf.TLSCertFile != "" {
		if ts, err = tlsutil.NewServer(tlsutil.Files{Cert: tf.TLSCertFile, Key: tf.TLSKeyFile}, false); err != nil {
			return "", nil, err
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: ops.Handler(o), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if ts != nil {
			srv.TLSConfig = ts.Config
			srv.ServeTLS(ln, "", "")
			return
		}
		srv.Serve(ln)
	}()
	return ln.Addr().String(), func() { srv.Close(); <-done }, nil
}

// sizeFlag defines a flag taking a size with a unit (512MiB, 1GiB) or a
// number of bytes; config.Load reads it into a bytesize.Size field.
func sizeFlag(f *pflag.FlagSet, name string, def bytesize.Size, usage string) {
	v := def
	f.Var(&v, name, usage)
}
