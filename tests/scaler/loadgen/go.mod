// The scaler bench's load generator builds offline, in module mode, from
// Debian's Go sources (apt-get install golang-go golang-google-grpc-dev;
// bookworm: Go 1.19, grpc-go 1.33.3): nothing is downloaded (go.sh sets
// GOPROXY=off).
//
// replace: each module that provides a package the load generator imports
// is read from its directory under /usr/share/gocode/src, whatever version
// the graph asks for; the versions in require are what grpc-go's go.mod
// files ask for, not what Debian ships.
//
// exclude: grpc-go's go.mod is older than go 1.17, so its whole requirement
// graph is loaded, including modules Debian does not package and nothing
// here imports (xDS, lint and tooling). Since Go 1.16 a requirement on an
// excluded version is dropped, so the graph closes without a download.
//
// `go mod tidy` cannot run offline; after a Debian update, `sh go.sh build
// main.go` (-mod=mod) brings this file up to date.
module prescaler/loadgen

go 1.19

require (
	github.com/golang/protobuf v1.4.1
	google.golang.org/grpc v1.33.3
)

require (
	golang.org/x/net v0.7.0 // indirect
	golang.org/x/sys v0.5.0 // indirect
	golang.org/x/text v0.7.0 // indirect
	google.golang.org/genproto v0.0.0-20200526211855-cb27e3aa2013 // indirect
)

replace (
	github.com/golang/protobuf => /usr/share/gocode/src/github.com/golang/protobuf
	golang.org/x/net => /usr/share/gocode/src/golang.org/x/net
	golang.org/x/sys => /usr/share/gocode/src/golang.org/x/sys
	golang.org/x/text => /usr/share/gocode/src/golang.org/x/text
	google.golang.org/genproto => /usr/share/gocode/src/google.golang.org/genproto
	google.golang.org/grpc => /usr/share/gocode/src/google.golang.org/grpc
)

exclude (
	github.com/cncf/udpa/go v0.0.0-20191209042840-269d4d468f6f
	github.com/envoyproxy/go-control-plane v0.9.4
	github.com/golang/glog v0.0.0-20160126235308-23def4e6c14b
	github.com/google/go-cmp v0.5.0
	github.com/google/uuid v1.1.2
	golang.org/x/lint v0.0.0-20190313153728-d0100b6bd8b3
	golang.org/x/mod v0.6.0-dev.0.20220419223038-86c51ed26bb4
	golang.org/x/oauth2 v0.0.0-20180821212333-d2e6202438be
	golang.org/x/term v0.5.0
	golang.org/x/tools v0.0.0-20190524140312-2c0ae7006135
	golang.org/x/tools v0.1.12
	google.golang.org/protobuf v1.25.0
	honnef.co/go/tools v0.0.0-20190523083050-ea95bdfd59fc
)
