import { ResourceExhaustedError } from "../../domain/errors.js";
import type { SignInFlowChanges, SignInFlowRecord } from "../sign-in-store.js";

/**
 * The sign_in_flows table as both engines read and write it: one SQL text for both ("?" placeholders, which the
 * PostgreSQL store numbers), the row, and row ↔ record.
 */
export interface SignInFlowRow {
  id: string;
  kind: string;
  client_id: string;
  redirect_uri: string;
  client_state: string;
  code_challenge: string;
  device_code_hash: string;
  user_code_hash: string;
  poll_interval: number;
  last_poll_time: number;
  scope_idp: string;
  scope_org: string;
  scope_provider: string;
  client_address: string;
  upstream_provider: string;
  upstream_state_hash: string;
  upstream_nonce: string;
  upstream_verifier: string;
  browser_binding_hash: string;
  status: string;
  identity_uid: string;
  code_hash: string;
  create_time: number;
  expire_time: number;
}

/** The column of each record field (scope is three columns). */
const COLUMN_OF: { readonly [F in Exclude<keyof SignInFlowRecord, "scope">]: keyof SignInFlowRow } = {
  id: "id",
  kind: "kind",
  clientId: "client_id",
  redirectUri: "redirect_uri",
  clientState: "client_state",
  codeChallenge: "code_challenge",
  deviceCodeHash: "device_code_hash",
  userCodeHash: "user_code_hash",
  pollInterval: "poll_interval",
  lastPollTime: "last_poll_time",
  clientAddress: "client_address",
  upstreamProvider: "upstream_provider",
  upstreamStateHash: "upstream_state_hash",
  upstreamNonce: "upstream_nonce",
  upstreamVerifier: "upstream_verifier",
  browserBindingHash: "browser_binding_hash",
  status: "status",
  identityUid: "identity_uid",
  codeHash: "code_hash",
  createTime: "create_time",
  expireTime: "expire_time",
};

/** The hashes that name one flow each (a unique index each, over the non-empty ones). */
export const FLOW_HASH_COLUMNS = ["upstream_state_hash", "device_code_hash", "user_code_hash", "code_hash"] as const;
export type FlowHashColumn = (typeof FLOW_HASH_COLUMNS)[number];

/** The non-empty hashes a flow (or a change to one) holds, by column. */
export function hashesSet(flow: SignInFlowChanges): [FlowHashColumn, string][] {
  const set: [FlowHashColumn, string | undefined][] = [
    ["upstream_state_hash", flow.upstreamStateHash],
    ["device_code_hash", flow.deviceCodeHash],
    ["user_code_hash", flow.userCodeHash],
    ["code_hash", flow.codeHash],
  ];
  return set.filter((e): e is [FlowHashColumn, string] => e[1] !== undefined && e[1] !== "");
}

/** What create() throws over the per-address bound. */
export function tooManyFlows(): ResourceExhaustedError {
  return new ResourceExhaustedError(
    "Resource exhausted: too many sign-ins in progress from this address; finish one or wait for it to expire",
  );
}

const COLUMNS = [...Object.values(COLUMN_OF), "scope_idp", "scope_org", "scope_provider"] as const;
const SELECT = COLUMNS.join(", ");

export const FLOW_SQL = {
  insert: `INSERT INTO sign_in_flows (${SELECT}) VALUES (${COLUMNS.map(() => "?").join(", ")})`,
  get: `SELECT ${SELECT} FROM sign_in_flows WHERE id = ? AND expire_time > ?`,
  by: (column: FlowHashColumn) => `SELECT ${SELECT} FROM sign_in_flows WHERE ${column} = ? AND expire_time > ?`,
  countAtAddress: "SELECT count(*) AS n FROM sign_in_flows WHERE client_address = ? AND expire_time > ?",
  deleteExpired: `DELETE FROM sign_in_flows WHERE id IN (
    SELECT id FROM sign_in_flows WHERE expire_time <= ? ORDER BY expire_time LIMIT ?)`,
};

/** The row's values in the insert's column order. */
export function insertValues(flow: SignInFlowRecord): unknown[] {
  const row = toRow(flow);
  return COLUMNS.map((c) => row[c]);
}

/**
 * The statement dropping expired flows that hold the new flow's id or one of its non-empty hashes (a unique key
 * an expired flow keeps until it is swept), and its parameters.
 */
export function dropExpiredHoldersSql(flow: SignInFlowRecord, now: number): { sql: string; params: unknown[] } {
  const held = hashesSet(flow);
  return {
    sql: `DELETE FROM sign_in_flows WHERE expire_time <= ? AND (id = ?${held.map(([c]) => ` OR ${c} = ?`).join("")})`,
    params: [now, flow.id, ...held.map(([, hash]) => hash)],
  };
}

/** The compare-and-set UPDATE of advance(): changes applied when the status is `from`; null when nothing changes. */
export function advanceSql(id: string, from: string, changes: SignInFlowChanges): { sql: string; params: unknown[] } {
  const sets: [string, unknown][] = [];
  for (const [field, value] of Object.entries(changes)) {
    if (value === undefined) continue;
    if (field === "scope") {
      const scope = value as SignInFlowRecord["scope"];
      sets.push(["scope_idp", scope.idp], ["scope_org", scope.org], ["scope_provider", scope.provider]);
    } else if (field in COLUMN_OF && field !== "id") {
      sets.push([COLUMN_OF[field as keyof typeof COLUMN_OF], value]);
    }
  }
  // With nothing to change, still a compare: the answer says whether the status was `from`.
  const assignments = sets.length > 0 ? sets.map(([c]) => `${c} = ?`).join(", ") : "status = status";
  return {
    sql: `UPDATE sign_in_flows SET ${assignments} WHERE id = ? AND status = ?`,
    params: [...sets.map(([, v]) => v), id, from],
  };
}

function toRow(flow: SignInFlowRecord): SignInFlowRow {
  const row = {} as Record<string, unknown>;
  for (const [field, column] of Object.entries(COLUMN_OF)) row[column] = flow[field as keyof typeof COLUMN_OF];
  row.scope_idp = flow.scope.idp;
  row.scope_org = flow.scope.org;
  row.scope_provider = flow.scope.provider;
  return row as unknown as SignInFlowRow;
}

export function toRecord(row: SignInFlowRow): SignInFlowRecord {
  return {
    id: row.id,
    kind: row.kind as SignInFlowRecord["kind"],
    clientId: row.client_id,
    redirectUri: row.redirect_uri,
    clientState: row.client_state,
    codeChallenge: row.code_challenge,
    deviceCodeHash: row.device_code_hash,
    userCodeHash: row.user_code_hash,
    pollInterval: Number(row.poll_interval),
    lastPollTime: Number(row.last_poll_time),
    scope: { idp: row.scope_idp, org: row.scope_org, provider: row.scope_provider },
    clientAddress: row.client_address,
    upstreamProvider: row.upstream_provider,
    upstreamStateHash: row.upstream_state_hash,
    upstreamNonce: row.upstream_nonce,
    upstreamVerifier: row.upstream_verifier,
    browserBindingHash: row.browser_binding_hash,
    status: row.status as SignInFlowRecord["status"],
    identityUid: row.identity_uid,
    codeHash: row.code_hash,
    createTime: Number(row.create_time),
    expireTime: Number(row.expire_time),
  };
}
