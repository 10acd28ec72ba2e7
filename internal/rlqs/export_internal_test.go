package rlqs

import (
	"github.com/floodgate-rl/floodgate/internal/rlmatch"
	"github.com/floodgate-rl/floodgate/rlconfig"
)

func rlmatchConfig(c *rlconfig.Config) *rlmatch.Config { return (*rlmatch.Config)(c) }
