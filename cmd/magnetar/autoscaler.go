package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/magnetar-io/magnetar/autoscaler"
	"github.com/magnetar-io/magnetar/internal/config"
	"github.com/magnetar-io/magnetar/internal/health"
	"github.com/magnetar-io/magnetar/internal/ops"
	"github.com/magnetar-io/magnetar/metastore"
)

// autoscalerConfig is the configuration of `magnetar autoscaler`.
type autoscalerConfig struct {
	ID                    string   `mapstructure:"id"`
	Metastore             []string `mapstructure:"metastore"`
	MetastoreRoot         string   `mapstructure:"metastore-root"`
	metastore.Credentials `mapstructure:",squash"`
	httpTLS               `mapstructure:",squash"`
	Kubeconfig            string        `mapstructure:"kubeconfig"`
	Namespace             string        `mapstructure:"namespace"`
	StatefulSet           string        `mapstructure:"statefulset"`
	Lease                 string        `mapstructure:"lease"`
	LeaseDuration         time.Duration `mapstructure:"lease-duration"`
	HTTPListen            string        `mapstructure:"http"`
	Pprof                 bool          `mapstructure:"pprof"`
	Interval              time.Duration `mapstructure:"interval"`
	DryRun                bool          `mapstructure:"dry-run"`

	MinBookies          int           `mapstructure:"min-bookies"`
	MaxBookies          int           `mapstructure:"max-bookies"`
	ScaleUpDiskUsage    float64       `mapstructure:"scale-up-disk-usage"`
	ScaleDownDiskUsage  float64       `mapstructure:"scale-down-disk-usage"`
	ScaleUpWriteBytes   float64       `mapstructure:"scale-up-write-bytes-per-sec"`
	ScaleDownWriteBytes float64       `mapstructure:"scale-down-write-bytes-per-sec"`
	Window              time.Duration `mapstructure:"window"`
	Cooldown            time.Duration `mapstructure:"cooldown"`
}

func defaultAutoscalerConfig() autoscalerConfig {
	host, _ := os.Hostname()
	return autoscalerConfig{
		ID:                  fmt.Sprintf("autoscaler-%s-%d", host, os.Getpid()),
		MetastoreRoot:       "/magnetar",
		StatefulSet:         "magnetar-bookie",
		Lease:               "magnetar-autoscaler",
		LeaseDuration:       15 * time.Second,
		Interval:            30 * time.Second,
		MinBookies:          3,
		MaxBookies:          10,
		ScaleUpDiskUsage:    0.75,
		ScaleDownDiskUsage:  0.40,
		ScaleUpWriteBytes:   64 << 20,
		ScaleDownWriteBytes: 8 << 20,
		Window:              5 * time.Minute,
		Cooldown:            10 * time.Minute,
	}
}

func (c *autoscalerConfig) validate() error {
	errs := checkProcess(c.ID, c.Metastore, c.HTTPListen)
	if err := c.httpTLS.check(); err != nil {
		errs = append(errs, err)
	}
	for flag, v := range map[string]string{"namespace": c.Namespace, "statefulset": c.StatefulSet, "lease": c.Lease} {
		if v == "" {
			errs = append(errs, fmt.Errorf("--%s is empty", flag))
		}
	}
	if c.MinBookies < 1 || c.MaxBookies < c.MinBookies {
		errs = append(errs, fmt.Errorf("--min-bookies %d and --max-bookies %d: want 1 <= min <= max", c.MinBookies, c.MaxBookies))
	}
	if !(0 < c.ScaleDownDiskUsage && c.ScaleDownDiskUsage < c.ScaleUpDiskUsage && c.ScaleUpDiskUsage <= 1) {
		errs = append(errs, fmt.Errorf("--scale-down-disk-usage %v and --scale-up-disk-usage %v: want 0 < down < up <= 1", c.ScaleDownDiskUsage, c.ScaleUpDiskUsage))
	}
	if !(0 <= c.ScaleDownWriteBytes && c.ScaleDownWriteBytes < c.ScaleUpWriteBytes) {
		errs = append(errs, fmt.Errorf("--scale-down-write-bytes-per-sec %v and --scale-up-write-bytes-per-sec %v: want 0 <= down < up", c.ScaleDownWriteBytes, c.ScaleUpWriteBytes))
	}
	for flag, d := range map[string]time.Duration{"interval": c.Interval, "lease-duration": c.LeaseDuration} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("--%s %v must be positive", flag, d))
		}
	}
	for flag, d := range map[string]time.Duration{"window": c.Window, "cooldown": c.Cooldown} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("--%s %v is negative", flag, d))
		}
	}
	if c.LeaseDuration > 0 && c.LeaseDuration < 3*time.Second {
		errs = append(errs, fmt.Errorf("--lease-duration %v is below 3s", c.LeaseDuration))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("autoscaler config: %w", err)
	}
	return nil
}

func loadAutoscalerConfig(flags *pflag.FlagSet, path string) (autoscalerConfig, error) {
	cfg := defaultAutoscalerConfig()
	if err := config.Load(flags, path, &cfg); err != nil {
		return cfg, err
	}
	return cfg, cfg.validate()
}

// kubeClient connects with the kubeconfig file at path, or from inside
// the cluster (the pod's service account) when path is empty.
func kubeClient(path string) (kubernetes.Interface, error) {
	var rc *rest.Config
	var err error
	if path != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", path)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	rc.UserAgent = "magnetar-autoscaler"
	return kubernetes.NewForConfig(rc)
}

func newAutoscalerCmd(g *globals) *cobra.Command {
	def := defaultAutoscalerConfig()
	cmd := &cobra.Command{
		Use:   "autoscaler",
		Short: "Scale the bookie StatefulSet on Kubernetes by disk usage and write load",
		Long: `Run the bookie autoscaler: it reads every bookie's disk usage and write rate
from its registration in etcd and scales the bookie StatefulSet through its
scale subresource: up by one when the fullest disk or the mean write rate
stays above its threshold for --window, down by one when both stay below
theirs. Scaling down always decommissions the highest-ordinal bookie first
and lowers the replicas only once its copies moved to the others; never
below --min-bookies or the largest ensemble of any ledger. One change at a
time, --cooldown between changes, one active instance (a Lease). Every
decision is logged and recorded as an Event on the StatefulSet. Every flag
can also be set with a MAGNETAR_* environment variable or in the --config
file.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadAutoscalerConfig(cmd.Flags(), g.config)
			if err != nil {
				return err
			}
			log, err := g.logger()
			if err != nil {
				return err
			}
			defer log.Sync()
			kube, err := kubeClient(cfg.Kubeconfig)
			if err != nil {
				return err
			}
			store, err := metastore.Open(cmd.Context(), metastore.Config{Endpoints: cfg.Metastore, Root: cfg.MetastoreRoot, Credentials: cfg.Credentials}, log)
			if err != nil {
				return err
			}
			defer store.Close()
			a, err := autoscaler.New(autoscaler.Config{
				ID: cfg.ID, Namespace: cfg.Namespace, StatefulSet: cfg.StatefulSet, Lease: cfg.Lease,
				Rules: autoscaler.Rules{
					MinBookies: cfg.MinBookies, MaxBookies: cfg.MaxBookies,
					ScaleUpDiskUsage: cfg.ScaleUpDiskUsage, ScaleDownDiskUsage: cfg.ScaleDownDiskUsage,
					ScaleUpWriteBytes: cfg.ScaleUpWriteBytes, ScaleDownWriteBytes: cfg.ScaleDownWriteBytes,
					Window: cfg.Window, Cooldown: cfg.Cooldown,
				},
				Interval: cfg.Interval, DryRun: cfg.DryRun, LeaseDuration: cfg.LeaseDuration,
				Logger: log.Named("autoscaler"),
			}, kube, store)
			if err != nil {
				return err
			}
			if cfg.HTTPListen != "" {
				addr, stop, err := serveOps(cfg.HTTPListen, cfg.httpTLS, ops.Options{Health: health.Checks{Ready: []health.Check{{Name: "metastore", Fn: func(ctx context.Context) error {
					_, err := store.Get(ctx, metastore.AuditorKey)
					if errors.Is(err, metastore.ErrNotFound) {
						return nil
					}
					return err
				}}}}, Metrics: ops.RuntimeMetrics(), Pprof: cfg.Pprof})
				if err != nil {
					return err
				}
				defer stop()
				log.Info("HTTP endpoints (health, metrics)", zap.String("http", addr))
			}
			log.Info("autoscaler running", zap.String("id", cfg.ID), zap.String("statefulset", cfg.Namespace+"/"+cfg.StatefulSet), zap.Bool("dry-run", cfg.DryRun))
			return a.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.String("id", def.ID, "instance name in the leader election Lease")
	f.StringSlice("metastore", def.Metastore, "etcd endpoints, comma-separated (required)")
	f.String("metastore-root", def.MetastoreRoot, "key prefix of the cluster in etcd")
	addMetastoreFlags(f)
	addHTTPTLSFlags(f)
	f.String("kubeconfig", def.Kubeconfig, "kubeconfig file (default: the pod's service account, in the cluster)")
	f.String("namespace", def.Namespace, "namespace of the bookie StatefulSet and the Lease (required; in the chart: the pod's)")
	f.String("statefulset", def.StatefulSet, "the bookie StatefulSet; its pods run bookies with --id=<pod name>")
	f.String("lease", def.Lease, "name of the leader election Lease")
	f.Duration("lease-duration", def.LeaseDuration, "leader election lease duration")
	f.String("http", def.HTTPListen, "HTTP address for the health endpoints /healthz and /readyz and /metrics, HOST:PORT (empty: none)")
	f.Bool("pprof", false, "serve Go's profiles under /debug/pprof/ on the HTTP port")
	f.Duration("interval", def.Interval, "how often the cluster is looked at")
	f.Bool("dry-run", def.DryRun, "decide, log and record Events, but change nothing")
	f.Int("min-bookies", def.MinBookies, "never fewer bookies than this (nor than the largest ensemble of any ledger)")
	f.Int("max-bookies", def.MaxBookies, "never more bookies than this")
	f.Float64("scale-up-disk-usage", def.ScaleUpDiskUsage, "scale up when the fullest bookie's filesystem is used above this share")
	f.Float64("scale-down-disk-usage", def.ScaleDownDiskUsage, "scale down only while every bookie's filesystem is used below this share")
	f.Float64("scale-up-write-bytes-per-sec", def.ScaleUpWriteBytes, "scale up when the mean write rate per bookie is above this")
	f.Float64("scale-down-write-bytes-per-sec", def.ScaleDownWriteBytes, "scale down only while the mean write rate per bookie is below this")
	f.Duration("window", def.Window, "a condition must hold this long before the autoscaler acts on it")
	f.Duration("cooldown", def.Cooldown, "the least time between the end of one change and the start of the next")
	return cmd
}
