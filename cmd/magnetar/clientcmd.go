package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/magnetar-io/magnetar/client"
	"github.com/magnetar-io/magnetar/internal/config"
	"github.com/magnetar-io/magnetar/internal/netaddr"
)

const defaultURL = "magnetar://127.0.0.1:6650"

func newClientCmd(g *globals) *cobra.Command {
	var url string
	var af authFlags
	cmd := &cobra.Command{Use: "client", Short: "Produce and consume messages",
		PersistentPreRunE: func(c *cobra.Command, _ []string) error {
			if err := config.ApplyToFlags(c.Flags(), g.config); err != nil {
				return err
			}
			if _, err := af.authentication(); err != nil {
				return err
			}
			return checkURL(url)
		}}
	cmd.PersistentFlags().StringVar(&url, "url", defaultURL, "cluster URL: magnetar://HOST:PORT (several brokers comma-separated)")
	af.register(cmd.PersistentFlags())

	var (
		messages []string
		count    int
		key      string
	)
	produce := &cobra.Command{
		Use:   "produce TOPIC",
		Short: "Send messages; prints the id of each",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(messages) == 0 {
				return errors.New("nothing to send: give -m TEXT")
			}
			if count < 1 {
				return fmt.Errorf("-n %d: must be at least 1", count)
			}
			c, err := newCLIClient(url, &af)
			if err != nil {
				return err
			}
			defer c.Close()
			p, err := c.CreateProducer(client.ProducerOptions{Topic: args[0]})
			if err != nil {
				return err
			}
			defer p.Close()
			for i := 0; i < count; i++ {
				for _, m := range messages {
					id, err := p.Send(cmd.Context(), &client.ProducerMessage{Payload: []byte(m), Key: key})
					if err != nil {
						return err
					}
					fmt.Fprintf(cmd.OutOrStdout(), "sent %s\n", id)
				}
			}
			return nil
		},
	}
	produce.Flags().StringArrayVarP(&messages, "messages", "m", nil, "message text (repeat for several)")
	produce.Flags().IntVarP(&count, "num-produce", "n", 1, "send the messages this many times")
	produce.Flags().StringVarP(&key, "key", "k", "", "message key")

	var (
		sub      string
		subType  string
		n        int
		position string
	)
	consume := &cobra.Command{
		Use:   "consume TOPIC",
		Short: "Receive messages, acknowledging each; prints payload, message id and key",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if sub == "" {
				return errors.New("a subscription name is required: -s NAME")
			}
			typ, err := parseSubscriptionType(subType)
			if err != nil {
				return err
			}
			pos := client.SubscriptionPositionLatest
			switch strings.ToLower(position) { // Pulsar's CLI spells them Latest and Earliest
			case "latest":
			case "earliest":
				pos = client.SubscriptionPositionEarliest
			default:
				return fmt.Errorf("-p %q: want earliest or latest", position)
			}
			if n < 0 {
				return fmt.Errorf("-n %d: must not be negative", n)
			}
			c, err := newCLIClient(url, &af)
			if err != nil {
				return err
			}
			defer c.Close()
			cons, err := c.Subscribe(client.ConsumerOptions{Topic: args[0], SubscriptionName: sub, Type: typ, SubscriptionInitialPosition: pos})
			if err != nil {
				return err
			}
			defer cons.Close()
			for i := 0; n == 0 || i < n; i++ {
				m, err := cons.Receive(cmd.Context())
				if errors.Is(err, context.Canceled) {
					return nil // interrupted
				}
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s\t%s\t%s\n", m.Payload(), m.ID(), m.Key())
				if err := cons.Ack(m); err != nil {
					return err
				}
			}
			return nil
		},
	}
	consume.Flags().StringVarP(&sub, "subscription-name", "s", "", "subscription name (required)")
	consume.Flags().StringVarP(&subType, "subscription-type", "t", "exclusive", "exclusive, failover, shared or key_shared (any case)")
	consume.Flags().IntVarP(&n, "num-messages", "n", 1, "exit after this many messages (0: until interrupted)")
	consume.Flags().StringVarP(&position, "subscription-position", "p", "latest", "where a new subscription starts: earliest or latest (any case)")
	cmd.AddCommand(produce, consume)
	return cmd
}

// checkURL checks --url before the SDK sees it, so that a bad broker
// address is reported with the flag's name (and a port of 0 or above 65535
// too, which the SDK leaves to the dialer).
func checkURL(url string) error {
	rest, ok := strings.CutPrefix(url, "magnetar://")
	if !ok {
		rest, ok = strings.CutPrefix(url, "magnetar+ssl://")
	}
	if !ok {
		return fmt.Errorf("--url %q: want magnetar://HOST:PORT[,HOST:PORT...] (or magnetar+ssl:// for TLS)", url)
	}
	for _, b := range strings.Split(strings.TrimSuffix(rest, "/"), ",") {
		if err := netaddr.Dial(b); err != nil {
			return fmt.Errorf("--url %q: broker %q: %w", url, b, err)
		}
	}
	return nil
}

func parseSubscriptionType(s string) (client.SubscriptionType, error) {
	switch strings.ToLower(s) {
	case "exclusive":
		return client.Exclusive, nil
	case "failover":
		return client.Failover, nil
	case "shared":
		return client.Shared, nil
	case "key_shared", "key-shared", "keyshared":
		return client.KeyShared, nil
	}
	return 0, fmt.Errorf("subscription type %q: want exclusive, failover, shared or key_shared", s)
}
