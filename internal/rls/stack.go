package rls

// growStack grows the calling goroutine's stack, if it is smaller, to
// 16 KiB, while the stack is still shallow: grpc-go runs each call on a
// fresh goroutine, whose stack starts smaller than a decision needs
// (about 15 KiB from the gRPC handler down to the Redis client), and the
// runtime grows a stack by copying it, adjusting every frame on it. Grown
// deep in a decision, that copy walked some 30 frames on every call
// (runtime.newstack: 7% of the service's CPU under rlsbench's allowed
// load); grown here it walks a handful. CockroachDB's growstack package
// does the same for its storage paths. It must not be inlined: its frame
// is gone before the decision runs in the room it made.
//
//go:noinline
func growStack() {
	var buf [stackReserve]byte
	touch(&buf)
}

// stackReserve is the frame that growStack puts on the stack: with the
// few frames above it, more than 8 KiB and less than 16 KiB, so that the
// runtime doubles an 8 KiB stack once, to 16 KiB (a size it keeps cached
// per P; 32 KiB and more come from the heap, under a lock).
const stackReserve = 12 << 10

// touch keeps growStack's buffer alive without letting it escape.
//
//go:noinline
func touch(b *[stackReserve]byte) { b[0] = 1 }
