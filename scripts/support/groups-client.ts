import { create } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import { CreateGroupRequestSchema, GroupsService, type Group } from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import { methodDefinition } from "../../src/server/grpc/adapter.js";

/** How long one call may take before the scripts count it as failed: a liveness bound, not a measurement. */
const CALL_TIMEOUT_MS = 30_000;

/** A created group as the server acknowledged it. */
export interface CreatedGroup {
  uid: string;
  name: string;
}

/** What a REST call answered. */
export interface RestAnswer {
  status: number;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  body: any;
}

/** Calls the REST API with the bearer token, JSON in and out. */
export async function restCall(baseUrl: string, token: string, method: string, path: string, body?: unknown): Promise<RestAnswer> {
  const res = await fetch(baseUrl + path, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(CALL_TIMEOUT_MS),
  });
  const text = await res.text();
  return { status: res.status, body: text === "" ? undefined : (JSON.parse(text) as unknown) };
}

/** Creates a group over REST (a root organization when parent is null); throws unless the answer is 200. */
export async function restCreateGroup(baseUrl: string, token: string, parent: string | null, name: string): Promise<CreatedGroup> {
  const res = await restCall(baseUrl, token, "POST", `/iam/v2beta1/groups${parent === null ? "" : `/${parent}`}`, { name });
  if (res.status !== 200) throw new Error(`REST create answered ${res.status}: ${JSON.stringify(res.body)}`);
  return { uid: res.body.uid as string, name: res.body.name as string };
}

/** A @grpc/grpc-js client of GroupsService.CreateGroup over h2c, like test/support/grpc.ts. */
export interface GrpcGroupsClient {
  createGroup(parent: string, name: string): Promise<CreatedGroup>;
  close(): void;
}

/** Opens a gRPC client to the server's one port, sending the token on every call. */
export function grpcGroupsClient(port: number, token: string): GrpcGroupsClient {
  const method = GroupsService.method.createGroup;
  const Ctor = grpc.makeGenericClientConstructor({ createGroup: methodDefinition(GroupsService, method) }, GroupsService.typeName);
  const client = new Ctor(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  return {
    createGroup(parent, name) {
      const md = new grpc.Metadata();
      md.set("authorization", `Bearer ${token}`);
      const request = create(CreateGroupRequestSchema, { parent, group: { name } });
      return new Promise((resolve, reject) => {
        // eslint-disable-next-line @typescript-eslint/no-explicit-any
        (client as any).createGroup(request, md, { deadline: Date.now() + CALL_TIMEOUT_MS }, (err: grpc.ServiceError | null, res: Group) =>
          err ? reject(err) : resolve({ uid: res.uid, name: res.name }),
        );
      });
    },
    close: () => client.close(),
  };
}
