module github.com/dmsc/dmsc

go 1.26.8

require (
	github.com/google/btree v1.1.3 // indirect
	github.com/google/uuid v1.6.0 // indirect
)
