package host

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Result is what FanOut got from one node.
type Result[T any] struct {
	Node     string
	Value    T
	Err      error
	Duration time.Duration // time fn took; zero when it never ran
}

// FanOut calls fn for every node, at most concurrency at a time (values
// below 1 mean 1), and returns one Result per node in input order. One
// node's error never stops the others. When ctx ends, nodes not started yet
// get ctx's cause as their error and fn is not called for them.
func FanOut[T any](ctx context.Context, nodes []string, concurrency int, fn func(ctx context.Context, node string) (T, error)) []Result[T] {
	results := make([]Result[T], len(nodes))
	concurrency = max(1, min(concurrency, len(nodes)))
	next := make(chan int)
	var wg sync.WaitGroup
	for range concurrency {
		wg.Go(func() {
			for i := range next {
				node := nodes[i]
				results[i].Node = node
				if err := ctx.Err(); err != nil {
					results[i].Err = fmt.Errorf("node %s: not started: %w", node, context.Cause(ctx))
					continue
				}
				start := time.Now()
				results[i].Value, results[i].Err = fn(ctx, node)
				results[i].Duration = time.Since(start)
			}
		})
	}
	for i := range nodes {
		next <- i
	}
	close(next)
	wg.Wait()
	return results
}
