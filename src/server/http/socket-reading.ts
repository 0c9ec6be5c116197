import type { IncomingMessage } from "node:http";
import type { Http2ServerRequest } from "node:http2";
import type { Socket } from "node:net";

/**
 * Control of what a connection reads from the kernel. Node's HTTP parser
 * reads a socket's handle directly: pausing the socket's stream (what
 * IncomingMessage does when nobody reads a body) does not stop it, so a
 * request body goes on arriving, parsed and buffered, while its handler is
 * still deciding whether it wants it. These stop the handle itself.
 */

interface StreamHandle {
  reading?: boolean;
  readStop?: () => number;
  readStart?: () => number;
}

/**
 * Holds the reading of a request's body until the returned release is
 * called, on either kind of request: an HTTP/1.1 request's whole
 * connection (its socket: it carries nothing else meanwhile), an HTTP/2
 * request's own stream only, never its connection, which carries other
 * calls (holding the socket would freeze them all). A held stream is not
 * read from: the bytes its client sends wait in the stream's flow-control
 * window (64 KiB), and past it the client waits.
 */
export function holdBody(req: IncomingMessage | Http2ServerRequest): () => void {
  return "stream" in req ? holdStream(req) : holdReading(req.socket);
}

/**
 * The HTTP/2 hold: the request does not ask its stream for data (a read
 * meanwhile is remembered and made on release), and a stream already
 * flowing into it is paused.
 */
function holdStream(req: Http2ServerRequest): () => void {
  const stream = req.stream;
  if (stream.destroyed) return () => {};
  const flowing = stream.readableFlowing === true;
  if (flowing) stream.pause();
  const own = Object.hasOwn(req, "_read");
  const read = req._read;
  let wanted: number | undefined;
  req._read = (size) => void (wanted = size);
  let held = true;
  return () => {
    if (!held) return;
    held = false;
    if (own) req._read = read;
    else delete (req as Partial<Http2ServerRequest>)._read;
    if (stream.destroyed) return;
    if (flowing) stream.resume();
    if (wanted !== undefined) req._read(wanted);
  };
}

/** Sockets whose reading stopped for good (stopReading): a hold's release leaves them stopped. */
const stopped = new WeakSet<Socket>();

function handleOf(socket: Socket): StreamHandle | undefined {
  return (socket as unknown as { _handle?: StreamHandle | null })._handle ?? undefined;
}

/**
 * Stops reading the socket until the returned release is called: a caller
 * is judged from the headers (token, deadline) before a byte more of its body
 * is read, however long the judging takes. The handle keeps its "reading"
 * flag (net.Socket restarts a handle it believes stopped whenever its stream
 * wants more), and its readStart waits for the release meanwhile. Release
 * restarts reading unless the socket closed or was stopped for good in the
 * meantime; it is safe to call twice.
 */
function holdReading(socket: Socket): () => void {
  const handle = handleOf(socket);
  if (handle?.readStop === undefined || handle.readStart === undefined || handle.reading !== true || socket.destroyed) return () => {};
  const readStart = handle.readStart;
  const own = Object.hasOwn(handle, "readStart");
  handle.readStart = () => 0;
  handle.readStop();
  let held = true;
  return () => {
    if (!held) return;
    held = false;
    if (own) handle.readStart = readStart;
    else delete handle.readStart;
    if (socket.destroyed || stopped.has(socket) || handleOf(socket) !== handle || handle.reading !== true) return;
    readStart.call(handle);
  };
}

/**
 * Stops reading the socket for good: what was read is parsed, nothing more
 * is read until a lingering close (one-port.ts) resumes the socket to drop
 * what still arrives, so the client reads its answers rather than a reset.
 */
export function stopReading(socket: Socket): void {
  stopped.add(socket);
  socket.pause();
  const handle = handleOf(socket);
  if (handle?.readStop === undefined) return;
  handle.reading = false;
  handle.readStop();
}
