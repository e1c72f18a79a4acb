package auth

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/magnetar-io/magnetar/internal/tlsutil"
)

// Peer is how a server process calls another's gRPC port (a broker or
// autorecovery calling bookies, a bookie calling bookies): over TLS when
// TLS is set, verified with Files.Trust (the system's authorities if
// empty) and presenting Files.Cert when it is a client certificate; with
// the token in TokenFile ("" for none).
type Peer struct {
	TLS       bool
	Files     tlsutil.Files
	TokenFile string
}

// DialOptions are p's gRPC dial options.
func (p Peer) DialOptions() ([]grpc.DialOption, error) {
	creds := insecure.NewCredentials()
	if p.TLS {
		tc, err := tlsutil.NewClient(p.Files, false)
		if err != nil {
			return nil, err
		}
		creds = credentials.NewTLS(tc)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if p.TokenFile != "" {
		if _, err := readToken(p.TokenFile); err != nil {
			return nil, err
		}
		opts = append(opts, grpc.WithPerRPCCredentials(&fileToken{path: p.TokenFile}))
	}
	return opts, nil
}

func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty", path)
	}
	return tok, nil
}

// fileTokenReread is how often a token file is read again, so that it can
// be rotated without a restart (and is not read for every call).
const fileTokenReread = time.Second

// fileToken presents the token of a file.
type fileToken struct {
	path string
	mu   sync.Mutex
	tok  string
	read time.Time
}

func (f *fileToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if time.Since(f.read) >= fileTokenReread {
		tok, err := readToken(f.path)
		if err != nil && f.tok == "" {
			return nil, err
		}
		if err == nil {
			f.tok = tok
		}
		f.read = time.Now()
	}
	return map[string]string{MetadataKey: "Bearer " + f.tok}, nil
}

// RequireTransportSecurity: tokens also go over plaintext, as clients'
// do; TLS is the operator's choice.
func (f *fileToken) RequireTransportSecurity() bool { return false }
