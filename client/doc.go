// Package client is Magnetar's Go SDK: producers, consumers and readers,
// shaped like pulsar-client-go.
//
//	c, err := client.NewClient(client.ClientOptions{URL: "magnetar://127.0.0.1:6650"})
//	p, err := c.CreateProducer(client.ProducerOptions{Topic: "orders"})
//	id, err := p.Send(ctx, &client.ProducerMessage{Payload: []byte("hello")})
//	cons, err := c.Subscribe(client.ConsumerOptions{Topic: "orders", SubscriptionName: "billing"})
//	msg, err := cons.Receive(ctx)
//	cons.Ack(msg)
//
// It depends only on package proto (and gRPC): applications do not pull in
// server code. internal/archtest checks that.
//
// Delivery: a message whose Send returned successfully is stored; after a
// send error or timeout it may or may not be (enable deduplication on the
// namespace to make resends safe). A producer reconnects with backoff when
// its broker restarts and resends what was not acknowledged, in order.
// Consumers receive messages at least once: unacknowledged messages come
// again after a reconnection. A message that cannot be read is not
// delivered: a corrupt one is dropped (acknowledged, with its reason, as
// pulsar-client-go drops it); one another client may read (encrypted:
// this client does not decrypt; a chunk of a chunked message: it does
// not join chunks; or over its limits) is left unacknowledged, and nacked
// on Shared and Key_Shared subscriptions (it never goes to the
// dead-letter topic). Both are told to ClientOptions.Logger.
//
// Topics named non-persistent://tenant/namespace/topic store nothing: a
// message goes only to the consumers connected, with receive queue room,
// when it is sent (others miss it), nothing is delivered again, and Seek
// and a reader's HasNext are refused (ErrNotAllowed) or false.
package client
