module github.com/drover-run/drover

go 1.26

require (
	github.com/cenkalti/backoff/v5 v5.0.3
	github.com/google/uuid v1.6.0
	github.com/mattn/go-sqlite3 v1.14.53
	github.com/sony/gobreaker/v2 v2.4.0
)
