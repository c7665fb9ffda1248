// Command listrace measures whether a server's listings, GETs and HEADs
// always show an object that one writer keeps overwriting (with If-Match,
// as fencefs writes an intent journal) while readers look at it: what a
// takeover's seal of a busy leader's journal may meet (docs/DESIGN.md §7,
// "Finding the journals"). It starts the server itself, from bin/ like the
// tests (FENCEFS_MINIO, FENCEFS_VERSITYGW), on 127.0.0.1, and stops it.
//
//	go run ./bench/listrace -server minio-4drives -duration 60s
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/fencefs/fencefs/integration/gateway"
)

func main() {
	server := flag.String("server", string(gateway.MinIOErasure), "versitygw, minio or minio-4drives")
	duration := flag.Duration("duration", time.Minute, "how long to measure")
	readers := flag.Int("readers", 2, "reader goroutines")
	flag.Parse()
	ctx := context.Background()
	gw, err := gateway.StartKind(ctx, gateway.Kind(*server), "")
	if err != nil {
		log.Fatalf("start %s: %v", *server, err)
	}
	defer gw.Stop()
	u, err := url.Parse(gw.Endpoint)
	if err != nil {
		log.Fatal(err)
	}
	c, err := minio.New(u.Host, &minio.Options{Creds: credentials.NewStaticV4(gw.AccessKey, gw.SecretKey, ""), Region: gw.Region})
	if err != nil {
		log.Fatal(err)
	}
	const bucket, dir = "listrace", "p/intents/00000000000000000320/"
	if err := c.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: gw.Region}); err != nil {
		log.Fatalf("make bucket: %v", err)
	}
	key := dir + "journal"
	info, err := c.PutObject(ctx, bucket, key, bytes.NewReader([]byte("{}")), 2, minio.PutObjectOptions{})
	if err != nil {
		log.Fatalf("put: %v", err)
	}
	var m counts
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1 + *readers)
	go func() { // the writer: a journal rewritten as fast as the server takes it
		defer wg.Done()
		etag := info.ETag
		for i := 0; !stop.Load(); i++ {
			b := []byte(fmt.Sprintf(`{"seq":%d,"keys":[{"key":"f3","bases":["%032d"]}]}`, i, i))
			opts := minio.PutObjectOptions{}
			opts.SetMatchETag(etag)
			if inf, err := c.PutObject(ctx, bucket, key, bytes.NewReader(b), int64(len(b)), opts); err == nil {
				etag = inf.ETag
				m.writes.Add(1)
			}
		}
	}()
	for range *readers {
		go func() {
			defer wg.Done()
			for !stop.Load() {
				m.look(ctx, c, bucket, dir, key)
			}
		}()
	}
	time.Sleep(*duration)
	stop.Store(true)
	wg.Wait()
	fmt.Printf("%s, %s: %d overwrites (%.0f/s); listings missing the object %d of %d; GETs %d of %d; HEADs %d of %d\n",
		*server, *duration, m.writes.Load(), float64(m.writes.Load())/duration.Seconds(),
		m.listMiss.Load(), m.lists.Load(), m.getMiss.Load(), m.gets.Load(), m.headMiss.Load(), m.heads.Load())
}

// counts are the measurements; a miss is any answer that does not show
// the object (not found, or another error).
type counts struct {
	writes, lists, listMiss, gets, getMiss, heads, headMiss atomic.Int64
}

// look lists dir, GETs key and HEADs it once each.
func (m *counts) look(ctx context.Context, c *minio.Client, bucket, dir, key string) {
	found := false
	for e := range c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: dir}) {
		found = found || e.Err == nil && e.Key == key
	}
	m.lists.Add(1)
	if !found {
		m.listMiss.Add(1)
	}
	o, err := c.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
	if err == nil {
		_, err = new(bytes.Buffer).ReadFrom(o)
		o.Close()
	}
	m.gets.Add(1)
	if err != nil {
		m.getMiss.Add(1)
	}
	_, err = c.StatObject(ctx, bucket, key, minio.StatObjectOptions{})
	m.heads.Add(1)
	if err != nil {
		m.headMiss.Add(1)
	}
}
