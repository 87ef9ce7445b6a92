// Command etcd-compact compacts the test cluster's etcd up to its current revision, as
// the API server's periodic compaction would: every older resourceVersion is gone, so a
// watch that resumes from one gets 410 Gone once the API server's watch cache has to ask
// etcd (after a restart of the API server, or for a collection served without the cache).
//
//	etcd-compact http://127.0.0.1:PORT
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: etcd-compact ENDPOINT")
		os.Exit(2)
	}
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{os.Args[1]}, DialTimeout: 5 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	status, err := client.Get(ctx, "compact-probe")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	revision := status.Header.Revision
	if _, err := client.Compact(ctx, revision, clientv3.WithCompactPhysical()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(revision)
}
