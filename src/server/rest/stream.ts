/**
 * A server stream's REST body, rendered as grpc-gateway's ForwardResponseStream renders it: newline-delimited JSON,
 * a {"result": …} line per message and, when the stream fails after its first message, a last {"error": <Status>}
 * line. An error before the first message is no line: it is thrown, so the request is answered with its HTTP
 * status and the usual error body, like any other.
 */
import type { DescMessage, Registry } from "@bufbuild/protobuf";
import { responseJson } from "../../codec/json.js";
import { restErrorBody, toConnectError } from "../errors.js";

/** The Content-Type of a server stream's REST body. */
export const NDJSON_TYPE = "application/x-ndjson";

/**
 * The lines of a stream of output messages, once its first message (or its end) is there: until then, an error
 * is thrown; afterwards it becomes the last line, in errorDomain. Lines are made only as they are read.
 */
export async function ndjsonLines(
  messages: AsyncIterable<unknown>,
  output: DescMessage,
  registry: Registry,
  errorDomain: string,
): Promise<AsyncIterable<string>> {
  const iterator = messages[Symbol.asyncIterator]();
  const first = await iterator.next();
  async function* lines(): AsyncGenerator<string> {
    try {
      for (let next = first; !next.done; next = await iterator.next()) yield `{"result":${responseJson(output, next.value, registry)}}\n`;
    } catch (err) {
      yield `${JSON.stringify({ error: restErrorBody(toConnectError(err, errorDomain)).body })}\n`;
    } finally {
      // The reader stopped early (its client went away): the handler is told, and records its call.
      await iterator.return?.();
    }
  }
  return lines();
}
