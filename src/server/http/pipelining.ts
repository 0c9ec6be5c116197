import type http from "node:http";
import type { Socket } from "node:net";
import { stopReading } from "./socket-reading.js";

/**
 * Requests one HTTP/1.1 connection may have waiting for their answers. Node
 * parses every request of a read at once and calls the handler for each,
 * queueing the answers, with no limit of its own: one write of 30 KB of
 * pipelined GETs started a thousand handlers. Browsers do not pipeline; the
 * clients that do send a few requests ahead, not sixteen.
 */
export const MAX_PIPELINED_REQUESTS = 16;

/** A connection's requests still waiting for (or receiving) their answers. */
interface PipelineState {
  waiting: number;
  /** Past the bound: nothing more is read or handled, and the connection closes once its answers are out. */
  over: boolean;
}

/**
 * Wraps an HTTP/1.1 request handler so that a connection may have at most
 * maxWaiting requests unanswered. The request past the bound and every one
 * after it on that connection is never handled; the connection stops reading,
 * finishes the answers it owes, and closes (RFC 9112 §9.3.2: a client that
 * pipelines retries what was not answered on a new connection).
 */
export function boundPipelining(handler: http.RequestListener, maxWaiting = MAX_PIPELINED_REQUESTS): http.RequestListener {
  const states = new WeakMap<Socket, PipelineState>();
  return (req, res) => {
    const socket = req.socket;
    let state = states.get(socket);
    if (!state) states.set(socket, (state = { waiting: 0, over: false }));
    if (state.over) return;
    if (state.waiting >= maxWaiting) {
      state.over = true;
      stopReading(socket);
      return;
    }
    state.waiting++;
    const pipeline = state;
    res.once("close", () => {
      pipeline.waiting--;
      if (pipeline.over && pipeline.waiting === 0) socket.destroySoon();
    });
    handler(req, res);
  };
}
