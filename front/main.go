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
	"bytes"
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

// ---------------------------------------------------------------- wire format

// field is one protobuf field: for wire type 0 the varint is in num64, for
// wire type 2 the bytes are in data.
type field struct {
	num   int
	wt    int
	num64 uint64
	data  []byte
}

// fields splits a protobuf message; false on malformed input.
func fields(b []byte, fn func(f field) bool) bool {
	for len(b) > 0 {
		tag, n := binary.Uvarint(b)
		if n <= 0 {
			return false
		}
		b = b[n:]
		f := field{num: int(tag >> 3), wt: int(tag & 7)}
		switch f.wt {
		case 0:
			v, n := binary.Uvarint(b)
			if n <= 0 {
				return false
			}
			f.num64, b = v, b[n:]
		case 1:
			if len(b) < 8 {
				return false
			}
			f.num64, b = binary.LittleEndian.Uint64(b), b[8:]
		case 2:
			l, n := binary.Uvarint(b)
			if n <= 0 || l > uint64(len(b)-n) {
				return false
			}
			f.data, b = b[n:n+int(l)], b[n+int(l):]
		case 5:
			if len(b) < 4 {
				return false
			}
			f.num64, b = uint64(binary.LittleEndian.Uint32(b)), b[4:]
		default:
			return false
		}
		if !fn(f) {
			return false
		}
	}
	return true
}

func appendPart(key []byte, part []byte) []byte {
	key = binary.AppendUvarint(key, uint64(len(part)))
	return append(key, part...)
}

type kv struct{ k, v []byte }

// refKey is a canonical key of a ScaledObjectRef: name, namespace and the
// metadata entries sorted by key. Anything unusual (unknown or repeated
// fields, duplicate metadata keys) is not cacheable: such calls are always
// forwarded, so the scaler alone decides what they mean.
func refKey(b []byte, key []byte) ([]byte, bool) {
	var name, namespace []byte
	seenName, seenNamespace := false, false
	var buf [32]kv // KEDA's metadata has a handful of keys: no allocation
	entries := buf[:0]
	ok := fields(b, func(f field) bool {
		if f.wt != 2 {
			return false
		}
		switch f.num {
		case 1:
			if seenName {
				return false
			}
			name, seenName = f.data, true
		case 2:
			if seenNamespace {
				return false
			}
			namespace, seenNamespace = f.data, true
		case 3:
			var e kv
			var k, v bool
			if !fields(f.data, func(g field) bool {
				if g.wt != 2 || (g.num == 1 && k) || (g.num == 2 && v) {
					return false
				}
				switch g.num {
				case 1:
					e.k, k = g.data, true
				case 2:
					e.v, v = g.data, true
				default:
					return false
				}
				return true
			}) {
				return false
			}
			entries = append(entries, e)
		default:
			return false
		}
		return true
	})
	if !ok {
		return nil, false
	}
	for i := 1; i < len(entries); i++ { // insertion sort: few keys, no allocation
		for j := i; j > 0 && bytes.Compare(entries[j].k, entries[j-1].k) < 0; j-- {
			entries[j], entries[j-1] = entries[j-1], entries[j]
		}
	}
	for i := 1; i < len(entries); i++ {
		if bytes.Equal(entries[i].k, entries[i-1].k) {
			return nil, false
		}
	}
	key = appendPart(key, name)
	key = appendPart(key, namespace)
	key = binary.AppendUvarint(key, uint64(len(entries)))
	for _, e := range entries {
		key = appendPart(key, e.k)
		key = appendPart(key, e.v)
	}
	return key, true
}

// requestKey is the canonical cache key of one call, or false if the call
// must be forwarded.
func requestKey(method string, req []byte, scratch []byte) ([]byte, bool) {
	key := append(scratch[:0], method...)
	key = append(key, 0)
	switch method {
	case mGetMetricSpec, mIsActive:
		return refKey(req, key)
	case mGetMetrics:
		var ref, metric []byte
		seenRef, seenMetric := false, false
		if !fields(req, func(f field) bool {
			if f.wt != 2 {
				return false
			}
			switch {
			case f.num == 1 && !seenRef:
				ref, seenRef = f.data, true
			case f.num == 2 && !seenMetric:
				metric, seenMetric = f.data, true
			default:
				return false
			}
			return true
		}) || !seenRef {
			return nil, false
		}
		key = appendPart(key, metric)
		return refKey(ref, key)
	}
	return nil, false
}

// ---------------------------------------------------------------- the table

type answer struct {
	ready      bool
	getMetrics []byte
	isActive   []byte
}

// table maps canonical requests to object ids and ids to their answers.
type table struct {
	mu      sync.RWMutex
	spec    []byte
	answers map[uint64]answer
	keys    map[string]uint64
	byID    map[uint64][]string
}

func newTable() *table {
	return &table{answers: map[uint64]answer{}, keys: map[string]uint64{}, byID: map[uint64][]string{}}
}

func (t *table) lookup(method string, key []byte) ([]byte, uint64, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	id, ok := t.keys[string(key)] // no allocation: the compiler indexes with the bytes
	if !ok {
		return nil, 0, false
	}
	a, ok := t.answers[id]
	if !ok {
		return nil, 0, false
	}
	switch method {
	case mGetMetricSpec:
		if t.spec != nil {
			return t.spec, id, true
		}
	case mGetMetrics:
		if a.ready {
			return a.getMetrics, id, true
		}
	case mIsActive:
		if a.ready {
			return a.isActive, id, true
		}
	}
	return nil, 0, false
}

func (t *table) learn(keyBytes []byte, id uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if old, ok := t.keys[string(keyBytes)]; ok && old == id {
		return
	}
	key := string(keyBytes)
	if len(t.keys) >= maxKeys { // bounded: forget every mapping, relearn on the next calls
		t.keys, t.byID = map[string]uint64{}, map[uint64][]string{}
	}
	t.keys[key] = id
	t.byID[id] = append(t.byID[id], key)
}

func (t *table) clear() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.spec = nil
	t.answers = map[uint64]answer{}
}

// apply decodes one TableUpdate (protos/front.proto) into the table.
func (t *table) apply(msg []byte) error {
	var (
		reset   bool
		spec    []byte
		answers = map[uint64]answer{}
		removed []uint64
	)
	ok := fields(msg, func(f field) bool {
		switch {
		case f.num == 1 && f.wt == 0:
			reset = f.num64 != 0
		case f.num == 2 && f.wt == 2:
			spec = f.data
		case f.num == 3 && f.wt == 2:
			var id uint64
			var a answer
			if !fields(f.data, func(g field) bool {
				switch {
				case g.num == 1 && g.wt == 0:
					id = g.num64
				case g.num == 2 && g.wt == 0:
					a.ready = g.num64 != 0
				case g.num == 3 && g.wt == 2:
					a.getMetrics = g.data
				case g.num == 4 && g.wt == 2:
					a.isActive = g.data
				}
				return true
			}) {
				return false
			}
			answers[id] = a
		case f.num == 4 && f.wt == 0:
			removed = append(removed, f.num64)
		case f.num == 4 && f.wt == 2:
			for b := f.data; len(b) > 0; {
				v, n := binary.Uvarint(b)
				if n <= 0 {
					return false
				}
				removed, b = append(removed, v), b[n:]
			}
		}
		return true
	})
	if !ok {
		return errors.New("malformed TableUpdate")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if reset {
		t.answers = map[uint64]answer{}
	}
	if spec != nil {
		t.spec = spec
	}
	for id, a := range answers {
		t.answers[id] = a
	}
	for _, id := range removed {
		delete(t.answers, id)
		for _, k := range t.byID[id] {
			if t.keys[k] == id {
				delete(t.keys, k)
			}
		}
		delete(t.byID, id)
	}
	return nil
}

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
