module github.com/floodgate-rl/floodgate

go 1.26.0

require go.uber.org/goleak v1.3.0

require (
	github.com/dunglas/httpsfv v1.1.2 // indirect
	github.com/go-chi/chi/v5 v5.5.0 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	github.com/redis/rueidis v1.0.79 // indirect
	github.com/sony/gobreaker/v2 v2.4.0 // indirect
	golang.org/x/crypto v0.59.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
