package rawstore

import "time"

// Freed C memory is handed back to the OS by a loop each Store runs.
// glibc keeps what Pebble frees (block cache evictions, flushed
// memtables) in its arenas for reuse, but the churn fragments them, so
// RSS crept up for as long as the cache turned over: reprocessing 1M
// events it rose linearly from 145 to 237 MB while Pebble's own memory
// (cache and memtables) stayed at 65-100 MB.
//
// glibc's count of free bytes includes pages already returned (a trim
// releases their pages, not the chunks), so the loop trims when the free
// bytes have grown trimSlack above their lowest point since the last
// trim: chunks reused since then were faulted in again, and freeing them
// again made them resident free memory. A trim walks every free chunk
// (~100 ms with 100 MB free), hence no unconditional trim every second.
const (
	trimSlack    = 32 << 20
	trimInterval = time.Second
)

// trimLoop trims until stop is closed, then closes done.
func trimLoop(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(trimInterval)
	defer t.Stop()
	low := cMallocFree()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			free := cMallocFree()
			low = min(low, free)
			if free-low > trimSlack {
				cMallocTrim()
				low = cMallocFree()
			}
		}
	}
}
