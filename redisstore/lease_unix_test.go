//go:build unix

package redisstore

import "syscall"

// syscallKill is SIGKILL: the process dies without releasing anything.
const syscallKill = syscall.SIGKILL
