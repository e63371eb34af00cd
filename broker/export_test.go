package broker

// Watched is the number of requests with long polls waiting, for tests that must act
// once a long poll is in place.
func Watched(s *Server) int { return s.waiters.watched() }

// WithDefaults is l with its zero fields set to the defaults.
func (l SignInLimits) WithDefaults() SignInLimits { return l.withDefaults() }
