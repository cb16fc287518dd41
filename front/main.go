// prescaler-front is the compiled gRPC front of `prescaler serve`.
//
// Why it exists: KEDA polls every ScaledObject with three unary calls
// (GetMetricSpec, GetMetrics, IsActive) each polling interval. With 1,000
// ScaledObjects polled every second that is 3,000 RPC/s, and Python's grpcio
// spends ~0.25 ms of one thread per call, so on a small node the event loop
// alone is saturated and p99 latency climbs to tens of milliseconds even when
// the handlers do nothing. The decisions themselves change only once per
// refresh (seconds), so this front answers those three calls from a table the
// Python scaler publishes, and forwards everything else (misses, errors,
// StreamIsActive, health, reflection) to the scaler unchanged.
//
// Contract with the Python side (scaler/front.py, protos/front.proto), over
// a private unix socket:
//   - the front calls Front/Watch once and receives TableUpdate messages:
//     per object id the serialized GetMetrics and IsActive answers, and the
//     (object-independent) GetMetricSpec answer;
//   - a forwarded call that succeeds carries the trailer x-prescaler-object
//     with the object's id, so the front learns which request maps to which
//     object; the request is keyed canonically (scalerMetadata map entries
//     sorted, because Go's protobuf marshals maps in random order);
//   - every --report-interval the front calls Front/Report with the ids it
//     answered (so the scaler knows they are still polled) and its RPC
//     latency histogram counts.
//
// The front holds no scaling logic: an object that is not in the table, or
// whose answer is not ready (UNAVAILABLE while warming up), is forwarded, so
// every error and every first answer comes from the scaler itself.
//
// Lifecycle: it prints "PRESCALER_FRONT_LISTENING <port>" once bound; it
// exits gracefully on SIGTERM (in-flight calls get --grace) and at once when
// its stdin closes (the parent died).
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/ioutil"
	"log"
	"math"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
)

const (
	scalerService  = "/externalscaler.ExternalScaler/"
	mGetMetricSpec = scalerService + "GetMetricSpec"
	mGetMetrics    = scalerService + "GetMetrics"
	mIsActive      = scalerService + "IsActive"
	mWatch         = "/prescaler.front.v1.Front/Watch"
	mReport        = "/prescaler.front.v1.Front/Report"
	objectTrailer  = "x-prescaler-object"
	maxKeys        = 200000
)

// rawCodec passes serialized messages through untouched: the front never
// needs generated Go code, and what it returns is exactly what Python built.
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

func (rawCodec) Name() string   { return "proto" }
func (rawCodec) String() string { return "proto" }

// ---------------------------------------------------------------- telemetry

type histogram struct {
	counts []uint64
	sum    float64
}

// stats accumulates what the next Report tells the scaler.
type stats struct {
	mu      sync.Mutex
	buckets []float64
	seen    map[uint64]struct{}
	hist    map[string]*histogram
}

func (s *stats) observe(method string, seconds float64, id uint64, hit bool) {
	name := method[strings.LastIndexByte(method, '/')+1:]
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.hist[name]
	if h == nil {
		h = &histogram{counts: make([]uint64, len(s.buckets)+1)}
		s.hist[name] = h
	}
	h.counts[sort.SearchFloat64s(s.buckets, seconds)]++
	h.sum += seconds
	if hit {
		s.seen[id] = struct{}{}
	}
}

// take returns the encoded ReportRequest and resets the accumulators.
func (s *stats) take() ([]byte, func()) {
	s.mu.Lock()
	seen, hist := s.seen, s.hist
	s.seen, s.hist = map[uint64]struct{}{}, map[string]*histogram{}
	s.mu.Unlock()
	restore := func() { // the report failed: merge back, nothing is lost
		s.mu.Lock()
		defer s.mu.Unlock()
		for id := range seen {
			s.seen[id] = struct{}{}
		}
		for name, h := range hist {
			cur := s.hist[name]
			if cur == nil {
				s.hist[name] = h
				continue
			}
			for i := range cur.counts {
				cur.counts[i] += h.counts[i]
			}
			cur.sum += h.sum
		}
	}
	var msg []byte
	if len(seen) > 0 {
		var packed []byte
		for id := range seen {
			packed = binary.AppendUvarint(packed, id)
		}
		msg = append(msg, 1<<3|2)
		msg = appendPart(msg, packed)
	}
	for name, h := range hist {
		var sub []byte
		sub = append(sub, 1<<3|2)
		sub = appendPart(sub, []byte(name))
		var packed []byte
		for _, c := range h.counts {
			packed = binary.AppendUvarint(packed, c)
		}
		sub = append(sub, 2<<3|2)
		sub = appendPart(sub, packed)
		sub = append(sub, 3<<3|1)
		sub = binary.LittleEndian.AppendUint64(sub, math.Float64bits(h.sum))
		msg = append(msg, 2<<3|2)
		msg = appendPart(msg, sub)
	}
	return msg, restore
}

// ---------------------------------------------------------------- the front

type front struct {
	backend *grpc.ClientConn
	table   *table
	stats   *stats
}

var codec = rawCodec{}

// keyPool recycles request-key buffers: the hot path allocates nothing but
// the request itself, so Go's collector rarely runs.
var keyPool = sync.Pool{New: func() interface{} { b := make([]byte, 0, 1024); return &b }}

func forwardable(ctx context.Context) context.Context {
	md, _ := metadata.FromIncomingContext(ctx)
	out := metadata.MD{}
	for k, v := range md {
		if strings.HasPrefix(k, ":") || strings.HasPrefix(k, "grpc-") ||
			k == "content-type" || k == "user-agent" || k == "te" {
			continue
		}
		out[k] = v
	}
	return metadata.NewOutgoingContext(ctx, out)
}

// handle is the one handler of every method: the three polled unary calls
// are answered from the table when possible; everything else is proxied.
func (f *front) handle(_ interface{}, ss grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(ss)
	switch method {
	case mGetMetricSpec, mGetMetrics, mIsActive:
		return f.unary(ss, method)
	}
	return f.proxy(ss, method)
}

func (f *front) unary(ss grpc.ServerStream, method string) error {
	start := time.Now()
	var req []byte
	if err := ss.RecvMsg(&req); err != nil {
		return err
	}
	scratch := keyPool.Get().(*[]byte)
	defer keyPool.Put(scratch)
	key, cacheable := requestKey(method, req, *scratch)
	if key != nil {
		*scratch = key[:0] // keep a grown buffer
	}
	if cacheable {
		if resp, id, ok := f.table.lookup(method, key); ok {
			err := ss.SendMsg(&resp)
			f.stats.observe(method, time.Since(start).Seconds(), id, true)
			return err
		}
	}
	var resp []byte
	var trailer metadata.MD
	err := f.backend.Invoke(forwardable(ss.Context()), method, &req, &resp,
		grpc.ForceCodec(codec), grpc.Trailer(&trailer))
	var id uint64
	learned := false
	if ids := trailer.Get(objectTrailer); len(ids) == 1 {
		if v, perr := strconv.ParseUint(ids[0], 10, 64); perr == nil {
			id, learned = v, true
		}
	}
	delete(trailer, objectTrailer)
	if len(trailer) > 0 {
		ss.SetTrailer(trailer)
	}
	if err == nil {
		if learned && cacheable {
			f.table.learn(key, id)
		}
		err = ss.SendMsg(&resp)
	}
	f.stats.observe(method, time.Since(start).Seconds(), id, false)
	return err
}

// proxy forwards one call of any shape (unary, server or bidi streaming:
// StreamIsActive, health Watch, reflection) to the scaler, which times it.
func (f *front) proxy(ss grpc.ServerStream, method string) error {
	ctx, cancel := context.WithCancel(forwardable(ss.Context()))
	defer cancel()
	desc := &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}
	cs, err := f.backend.NewStream(ctx, desc, method, grpc.ForceCodec(codec))
	if err != nil {
		return err
	}
	go func() {
		for {
			var m []byte
			if err := ss.RecvMsg(&m); err != nil {
				if err == io.EOF {
					_ = cs.CloseSend()
				} else {
					cancel()
				}
				return
			}
			if err := cs.SendMsg(&m); err != nil {
				return
			}
		}
	}()
	first := true
	for {
		var m []byte
		if err := cs.RecvMsg(&m); err != nil {
			if t := cs.Trailer(); len(t) > 0 {
				ss.SetTrailer(t)
			}
			if err == io.EOF {
				return nil
			}
			return err
		}
		if first {
			if h, herr := cs.Header(); herr == nil && len(h) > 0 {
				_ = ss.SendHeader(h)
			}
			first = false
		}
		if err := ss.SendMsg(&m); err != nil {
			return err
		}
	}
}

// watch keeps the table in step with the scaler; on any break the table is
// cleared (every call forwarded) until the stream is back.
func (f *front) watch(ctx context.Context) {
	for ctx.Err() == nil {
		err := f.watchOnce(ctx)
		f.table.clear()
		if ctx.Err() != nil {
			return
		}
		log.Printf("watch stream ended (%v); answering by forwarding until it is back", err)
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (f *front) watchOnce(ctx context.Context) error {
	desc := &grpc.StreamDesc{ServerStreams: true}
	cs, err := f.backend.NewStream(ctx, desc, mWatch, grpc.ForceCodec(codec), grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	empty := []byte{}
	if err := cs.SendMsg(&empty); err != nil {
		return err
	}
	if err := cs.CloseSend(); err != nil {
		return err
	}
	for {
		var m []byte
		if err := cs.RecvMsg(&m); err != nil {
			return err
		}
		if err := f.table.apply(m); err != nil {
			return err
		}
	}
}

func (f *front) report(ctx context.Context, every time.Duration) {
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		msg, restore := f.stats.take()
		if len(msg) == 0 {
			continue
		}
		call, cancel := context.WithTimeout(ctx, 5*time.Second)
		var resp []byte
		if err := f.backend.Invoke(call, mReport, &msg, &resp, grpc.ForceCodec(codec)); err != nil {
			restore()
		}
		cancel()
	}
}

// ---------------------------------------------------------------- TLS

// reloadingTLS serves the files' current contents: a certificate rotated in
// place (cert-manager) is picked up at the next handshake, as the Python
// server does.
func reloadingTLS(certPath, keyPath, caPath string) (*tls.Config, error) {
	load := func() (*tls.Config, error) {
		pair, err := tls.LoadX509KeyPair(certPath, keyPath)
		if err != nil {
			return nil, err
		}
		cfg := &tls.Config{Certificates: []tls.Certificate{pair}, NextProtos: []string{"h2"},
			MinVersion: tls.VersionTLS12}
		if caPath != "" {
			pem, err := ioutil.ReadFile(caPath)
			if err != nil {
				return nil, err
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("%s: no certificate found", caPath)
			}
			cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
		}
		return cfg, nil
	}
	stamp := func() string {
		var parts []string
		for _, p := range []string{certPath, keyPath, caPath} {
			if p == "" {
				continue
			}
			if st, err := os.Stat(p); err == nil {
				parts = append(parts, st.ModTime().String())
			}
		}
		return strings.Join(parts, "|")
	}
	current, err := load()
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	loadedAt := stamp()
	return &tls.Config{
		NextProtos: []string{"h2"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			mu.Lock()
			defer mu.Unlock()
			if now := stamp(); now != loadedAt {
				if fresh, err := load(); err == nil {
					current, loadedAt = fresh, now
				} else {
					log.Printf("TLS files changed but do not load (%v); keeping the old ones", err)
				}
			}
			return current, nil
		},
	}, nil
}

// ---------------------------------------------------------------- main

func parseBuckets(s string) ([]float64, error) {
	var out []float64
	for _, part := range strings.Split(s, ",") {
		if part == "" {
			continue
		}
		v, err := strconv.ParseFloat(part, 64)
		if err != nil {
			return nil, fmt.Errorf("--buckets: %v", err)
		}
		out = append(out, v)
	}
	if !sort.Float64sAreSorted(out) {
		return nil, errors.New("--buckets must be ascending")
	}
	return out, nil
}

func main() {
	listen := flag.String("listen", "0.0.0.0:9090", "address the KEDA-facing gRPC server binds")
	backend := flag.String("backend", "", "unix socket path of the Python scaler")
	certFile := flag.String("tls-cert", "", "server certificate chain (PEM)")
	keyFile := flag.String("tls-key", "", "server private key (PEM)")
	caFile := flag.String("client-ca", "", "client CA (PEM); enables mTLS")
	bucketList := flag.String("buckets", "", "RPC latency histogram bounds, seconds, ascending")
	reportEvery := flag.Duration("report-interval", 2*time.Second, "how often to report to the scaler")
	grace := flag.Duration("grace", 10*time.Second, "drain time for in-flight calls on SIGTERM")
	flag.Parse()
	log.SetPrefix("prescaler-front: ")
	// Its live heap is a few MB: collect less often (fewer GC assists on the hot path).
	debug.SetGCPercent(400)
	if *backend == "" {
		log.Fatal("--backend is required")
	}
	buckets, err := parseBuckets(*bucketList)
	if err != nil {
		log.Fatal(err)
	}

	path := *backend
	conn, err := grpc.Dial("passthrough:///prescaler-backend",
		grpc.WithInsecure(),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}))
	if err != nil {
		log.Fatal(err)
	}
	f := &front{backend: conn, table: newTable(),
		stats: &stats{buckets: buckets, seen: map[uint64]struct{}{}, hist: map[string]*histogram{}}}

	opts := []grpc.ServerOption{
		grpc.CustomCodec(codec),
		grpc.UnknownServiceHandler(f.handle),
		// KEDA holds one connection and a StreamIsActive stream for hours:
		// allow its keepalive pings.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime: 5 * time.Second, PermitWithoutStream: true}),
	}
	if *certFile != "" {
		cfg, err := reloadingTLS(*certFile, *keyFile, *caFile)
		if err != nil {
			log.Fatal(err)
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg)))
	}
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	server := grpc.NewServer(opts...)
	ctx, cancel := context.WithCancel(context.Background())
	go f.watch(ctx)
	go f.report(ctx, *reportEvery)

	finished := make(chan struct{})
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-signals
		done := make(chan struct{})
		go func() { server.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(*grace):
			server.Stop()
		}
		cancel()
		close(finished)
	}()
	go func() { // the parent holds our stdin: EOF means it is gone
		_, _ = io.Copy(ioutil.Discard, os.Stdin)
		server.Stop()
		os.Exit(0)
	}()

	fmt.Printf("PRESCALER_FRONT_LISTENING %d\n", lis.Addr().(*net.TCPAddr).Port)
	if err := server.Serve(lis); err != nil {
		log.Fatal(err)
	}
	<-finished // Serve returns when stopping starts; in-flight calls finish first
	// Last report so the scaler's counters include the final calls.
	if msg, _ := f.stats.take(); len(msg) > 0 {
		call, done := context.WithTimeout(context.Background(), time.Second)
		var resp []byte
		_ = f.backend.Invoke(call, mReport, &msg, &resp, grpc.ForceCodec(codec))
		done()
	}
}
