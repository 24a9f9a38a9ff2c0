package fleet

// Owner returns the ID of the member that should own account: the one
// with the highest rendezvous weight hash(member ID, account), ties going
// to the lower ID. Every instance computes the same owner from the same
// set without coordination, and a member joining or leaving moves only
// the accounts whose highest weight it takes or held: about 1/N of them.
// "" when members is empty.
func Owner(account string, members []Member) string {
	var best string
	var bestW uint64
	for i, m := range members {
		w := weight(m.ID, account)
		if i == 0 || w > bestW || (w == bestW && m.ID < best) {
			best, bestW = m.ID, w
		}
	}
	return best
}

// weight is FNV-1a 64 over member, a zero byte and account, finished with
// splitmix64's mixer so that close inputs spread over the whole range. It
// must never change: every instance of a deployment must agree.
func weight(member, account string) uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for i := 0; i < len(member); i++ {
		h = (h ^ uint64(member[i])) * prime
	}
	h *= prime // the separator, a zero byte
	for i := 0; i < len(account); i++ {
		h = (h ^ uint64(account[i])) * prime
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}
