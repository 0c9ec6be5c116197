/** How often the event loop's delay is sampled. */
const SAMPLE_EVERY_MS = 20;

/**
 * Samples the event loop's delay: a timer due every SAMPLE_EVERY_MS reports
 * how late it ran (observe(seconds)), which is how long a request arriving
 * then would have waited for the process to look at it. Unlike prom-client's
 * nodejs_eventloop_lag_* gauges (perf_hooks' histogram over its 10 ms
 * sampling interval, so an idle loop reads 10 ms, and reset by every scrape),
 * these are plain delays that a histogram can sum across scrapes and
 * workers. The timer does not keep the process alive. Returns the way to stop.
 */
export function sampleEventLoopDelay(observe: (seconds: number) => void): () => void {
  let timer: NodeJS.Timeout | undefined;
  let due = 0;
  const schedule = () => {
    due = performance.now() + SAMPLE_EVERY_MS;
    timer = setTimeout(tick, SAMPLE_EVERY_MS).unref();
  };
  const tick = () => {
    observe(Math.max(0, performance.now() - due) / 1000);
    schedule();
  };
  schedule();
  return () => clearTimeout(timer);
}
