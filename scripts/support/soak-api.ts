import { create, type DescService } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import { AuthService } from "../../gen/platformapi/auth/v1/auth_pb.js";
import { GroupsService, type Group, type ListGroupsResponse } from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import { methodDefinition } from "../../src/server/grpc/adapter.js";

/** How long one call may take before it counts as failed: a liveness bound, not a measurement. */
const CALL_TIMEOUT_MS = 30_000;

export type Protocol = "rest" | "grpc";

/**
 * How a call failed, as far as the client can tell:
 * - refused: nothing came back and the server says it did not take the call
 *   (connection refused or reset while connecting, 503 with `Connection: close`, gRPC UNAVAILABLE);
 *   whether the server really never ran it is checked against its access log;
 * - broken: the connection or stream died under a sent request (socket hang
 *   up, ECONNRESET, gRPC CANCELLED/INTERNAL without the server's status details);
 * - answer: the server answered, with a status the soak did not expect.
 */
export type FailureKind = "refused" | "broken" | "answer";

/** A failed call. */
export class CallFailedError extends Error {
  constructor(
    readonly kind: FailureKind,
    message: string,
  ) {
    super(message);
    this.name = "CallFailedError";
  }
}

/** One page of ListGroups. */
export interface GroupPage {
  uids: string[];
  nextPageToken: string;
}

/**
 * The calls the soak makes, over one protocol. Each sends reqId as
 * x-request-id (the server logs it with the call) and throws CallFailedError
 * unless the call succeeds.
 */
export interface SoakApi {
  readonly protocol: Protocol;
  getGroup(reqId: string, uid: string): Promise<void>;
  listGroups(reqId: string, descendantsOf: string, pageSize: number, pageToken: string): Promise<GroupPage>;
  /** AuthService.Validate (GET /auth/v1/ok). */
  whoAmI(reqId: string): Promise<void>;
  /** Returns the new group's uid. */
  createGroup(reqId: string, parent: string, name: string): Promise<string>;
  updateGroup(reqId: string, uid: string, description: string): Promise<void>;
  deleteGroup(reqId: string, uid: string): Promise<void>;
  close(): void;
}

/** REST over the global fetch, i.e. undici's default agent with keep-alive connections. */
export function restSoakApi(baseUrl: string, token: string): SoakApi {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const call = async (reqId: string, method: string, path: string, body?: unknown): Promise<any> => {
    let res: Response;
    let text: string;
    try {
      res = await fetch(baseUrl + path, {
        method,
        headers: {
          authorization: `Bearer ${token}`,
          "x-request-id": reqId,
          ...(body === undefined ? {} : { "content-type": "application/json" }),
        },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(CALL_TIMEOUT_MS),
      });
      text = await res.text();
    } catch (err) {
      const cause = (err as { cause?: { code?: string; syscall?: string; message?: string } }).cause;
      const code = cause?.code ?? (err as Error).name;
      const detail = `${method} ${shown(path)}: ${code} ${cause?.message ?? (err as Error).message}`;
      // A connection that failed while connecting (refused, or reset from the backlog of a listener closing
      // just then) carried no byte of the request: the server cannot have taken the call.
      throw new CallFailedError(code === "ECONNREFUSED" || cause?.syscall === "connect" ? "refused" : "broken", detail);
    }
    if (res.status === 503 && res.headers.get("connection")?.toLowerCase() === "close") {
      throw new CallFailedError("refused", `${method} ${shown(path)}: 503 Connection: close`);
    }
    if (res.status !== 200) throw new CallFailedError("answer", `${method} ${shown(path)}: ${res.status} ${text.slice(0, 200)}`);
    return text === "" ? undefined : JSON.parse(text);
  };
  return {
    protocol: "rest",
    getGroup: async (reqId, uid) => expectUid((await call(reqId, "GET", `/iam/v2beta1/groups/${uid}`))?.uid, uid),
    async listGroups(reqId, descendantsOf, pageSize, pageToken) {
      const tokenParam = pageToken === "" ? "" : `&page_token=${encodeURIComponent(pageToken)}`;
      const res = await call(reqId, "GET", `/iam/v2beta1/groups?uidp.descendants_of=${descendantsOf}&page_size=${pageSize}${tokenParam}`);
      return { uids: (res.groups as { uid: string }[]).map((g) => g.uid), nextPageToken: (res.nextPageToken as string | undefined) ?? "" };
    },
    whoAmI: async (reqId) => void (await call(reqId, "GET", "/auth/v1/ok")),
    createGroup: async (reqId, parent, name) => (await call(reqId, "POST", `/iam/v2beta1/groups/${parent}`, { name })).uid as string,
    updateGroup: async (reqId, uid, description) =>
      expectUid((await call(reqId, "PATCH", `/iam/v2beta1/groups/${uid}`, { description }))?.uid, uid),
    deleteGroup: async (reqId, uid) => void (await call(reqId, "DELETE", `/iam/v2beta1/groups/${uid}`)),
    close: () => {},
  };
}

/** @grpc/grpc-js over h2c to the one port: one channel (one HTTP/2 connection) for every worker. */
export function grpcSoakApi(port: number, token: string): SoakApi {
  const groups = grpcClient(GroupsService, port);
  const auth = grpcClient(AuthService, port);
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const call = (client: grpc.Client, service: DescService, reqId: string, method: string, request: unknown): Promise<any> => {
    const md = new grpc.Metadata();
    md.set("authorization", `Bearer ${token}`);
    md.set("x-request-id", reqId);
    const schema = service.methods.find((m) => m.localName === method)!.input;
    return new Promise((resolve, reject) => {
      // eslint-disable-next-line @typescript-eslint/no-explicit-any
      (client as any)[method](
        create(schema, request as never),
        md,
        { deadline: Date.now() + CALL_TIMEOUT_MS },
        (err: grpc.ServiceError | null, res: unknown) => (err ? reject(grpcFailure(method, err)) : resolve(res)),
      );
    });
  };
  const groupsCall = (reqId: string, method: string, request: unknown) => call(groups, GroupsService, reqId, method, request);
  return {
    protocol: "grpc",
    getGroup: async (reqId, uid) => expectUid(((await groupsCall(reqId, "getGroup", { uid })) as Group).uid, uid),
    async listGroups(reqId, descendantsOf, pageSize, pageToken) {
      const res = (await groupsCall(reqId, "listGroups", { uidp: { descendantsOf }, pageSize, pageToken })) as ListGroupsResponse;
      return { uids: res.groups.map((g) => g.uid), nextPageToken: res.nextPageToken };
    },
    whoAmI: async (reqId) => void (await call(auth, AuthService, reqId, "validate", {})),
    createGroup: async (reqId, parent, name) => ((await groupsCall(reqId, "createGroup", { parent, group: { name } })) as Group).uid,
    updateGroup: async (reqId, uid, description) =>
      expectUid(
        ((await groupsCall(reqId, "updateGroup", { group: { uid, description }, updateMask: { paths: ["description"] } })) as Group).uid,
        uid,
      ),
    deleteGroup: async (reqId, uid) => void (await groupsCall(reqId, "deleteGroup", { uid })),
    close() {
      groups.close();
      auth.close();
    },
  };
}

/** A generic grpc-js client of every unary method of service. */
function grpcClient(service: DescService, port: number): grpc.Client {
  const definition: grpc.ServiceDefinition = {};
  for (const m of service.methods) (definition as Record<string, unknown>)[m.localName] = methodDefinition(service, m);
  const Ctor = grpc.makeGenericClientConstructor(definition, service.typeName);
  return new Ctor(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
}

/**
 * Our server puts google.rpc.Status in grpc-status-details-bin on every error
 * it answers; a status without it was made up by grpc-js from what happened
 * to the connection or stream.
 */
function grpcFailure(method: string, err: grpc.ServiceError): CallFailedError {
  const detail = `${method}: ${grpc.status[err.code]} ${err.details}`;
  if (err.metadata?.get("grpc-status-details-bin").length > 0) return new CallFailedError("answer", detail);
  return new CallFailedError(err.code === grpc.status.UNAVAILABLE ? "refused" : "broken", detail);
}

/** A path for a failure message: page tokens are long and say nothing. */
function shown(path: string): string {
  return path.replace(/page_token=[^&]+/, "page_token=…");
}

function expectUid(got: unknown, want: string): void {
  if (got !== want) throw new CallFailedError("answer", `answered uid ${JSON.stringify(got)}, asked for ${want}`);
}
