// keda-loadgen polls a KEDA external scaler the way KEDA's operator does,
// with KEDA's own RPC stack (grpc-go), so that a benchmark measures the
// scaler and not a Python client that costs as much CPU per RPC as the
// server it is measuring.
//
// For each ScaledObject, once per interval_s (1 s unless the plan says
// otherwise) from a random phase (KEDA's
// pollers are not synchronised): GetMetricSpec, GetMetrics, IsActive, in
// that order, over ONE shared connection (KEDA pools one connection per
// scalerAddress) with round_robin balancing like KEDA's dialer. Requests
// arrive as serialized protobuf bytes made by the Python protos, and replies
// leave as bytes: a pass-through codec means no generated Go code is
// needed, and the bytes on the wire are exactly the Python-built messages.
//
// Input: a JSON plan on stdin (see plan below). Output: JSON on stdout in
// the Python bench client's shape.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type rawCodec struct{}

func (rawCodec) Marshal(v interface{}) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("rawCodec: %T is not *[]byte", v)
	}
	return *b, nil
}

func (rawCodec) Unmarshal(data []byte, v interface{}) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("rawCodec: %T is not *[]byte", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

// Name is "proto" so the content-type is application/grpc+proto, as KEDA sends.
func (rawCodec) Name() string { return "proto" }

type object struct {
	Name           string `json:"name"`
	Ref            []byte `json:"ref"`             // ScaledObjectRef
	MetricsRequest []byte `json:"metrics_request"` // GetMetricsRequest
}

type plan struct {
	Address string  `json:"address"`
	StartAt float64 `json:"start_at"` // unix seconds, shared by all generators
	Seconds float64 `json:"seconds"`
	// IntervalS is each object's poll interval; 0 or absent means 1 s. Shorter
	// intervals stand for more objects at the same call rate.
	IntervalS float64  `json:"interval_s"`
	TimeoutS  float64  `json:"timeout_s"`
	Seed      int64    `json:"seed"`
	Objects   []object `json:"objects"`
}

type sample [2]float64 // seconds since start when the poll began, seconds taken

type result struct {
	Polls        int                 `json:"polls"`
	Errors       int                 `json:"errors"`
	WarmingUp    int                 `json:"warming_up"`
	ErrorSamples []string            `json:"error_samples"`
	Latencies    map[string][]sample `json:"latencies"`
	LastMetrics  map[string][]byte   `json:"last_metrics"` // GetMetricsResponse bytes
}

const service = "/externalscaler.ExternalScaler/"

func main() {
	var p plan
	if err := json.NewDecoder(os.Stdin).Decode(&p); err != nil {
		fmt.Fprintln(os.Stderr, "keda-loadgen: bad plan:", err)
		os.Exit(2)
	}
	conn, err := grpc.Dial(
		p.Address,
		grpc.WithInsecure(),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"round_robin":{}}]}`),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, "keda-loadgen: dial:", err)
		os.Exit(2)
	}
	defer conn.Close()

	start := time.Unix(0, int64(p.StartAt*1e9))
	end := start.Add(time.Duration(p.Seconds * float64(time.Second)))
	timeout := time.Duration(p.TimeoutS * float64(time.Second))
	interval := time.Second
	if p.IntervalS > 0 {
		interval = time.Duration(p.IntervalS * float64(time.Second))
	}
	rng := rand.New(rand.NewSource(p.Seed))
	phases := make([]time.Duration, len(p.Objects))
	for i := range phases {
		phases[i] = time.Duration(rng.Float64() * float64(interval))
	}

	out := result{
		ErrorSamples: []string{},
		Latencies:    map[string][]sample{"GetMetricSpec": {}, "GetMetrics": {}, "IsActive": {}},
		LastMetrics:  map[string][]byte{},
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, obj := range p.Objects {
		wg.Add(1)
		go func(obj object, phase time.Duration) {
			defer wg.Done()
			local := map[string][]sample{}
			polls, errs, warming := 0, 0, 0
			var samples []string
			var last []byte
			call := func(method string, req []byte, at float64) ([]byte, error) {
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				defer cancel()
				var reply []byte
				t0 := time.Now()
				err := conn.Invoke(ctx, service+method, &req, &reply)
				if err == nil {
					local[method] = append(local[method], sample{at, time.Since(t0).Seconds()})
				}
				return reply, err
			}
			for next := start.Add(phase); next.Before(end); next = next.Add(interval) {
				time.Sleep(time.Until(next))
				at := time.Since(start).Seconds()
				_, err := call("GetMetricSpec", obj.Ref, at)
				var reply []byte
				if err == nil {
					reply, err = call("GetMetrics", obj.MetricsRequest, at)
				}
				if err == nil {
					_, err = call("IsActive", obj.Ref, at)
				}
				if err != nil {
					st, _ := status.FromError(err)
					if st.Code() == codes.Unavailable && strings.Contains(st.Message(), "warming_up") {
						warming++
					} else {
						errs++
						if len(samples) < 5 {
							samples = append(samples, st.Code().String()+": "+st.Message())
						}
					}
					continue
				}
				polls++
				last = reply
			}
			mu.Lock()
			defer mu.Unlock()
			out.Polls += polls
			out.Errors += errs
			out.WarmingUp += warming
			for _, s := range samples {
				if len(out.ErrorSamples) < 5 {
					out.ErrorSamples = append(out.ErrorSamples, s)
				}
			}
			for m, v := range local {
				out.Latencies[m] = append(out.Latencies[m], v...)
			}
			if last != nil {
				out.LastMetrics[obj.Name] = last
			}
		}(obj, phases[i])
	}
	wg.Wait()
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "keda-loadgen: write:", err)
		os.Exit(2)
	}
}
