import type { IdentityOrder, IdentityRecord, IdentityRelationship } from "../store.js";
import { type TableSpec } from "./table.js";

/** The identities table as both engines read it: its list spec, row and record. */
export const TABLE: TableSpec<IdentityOrder> = {
  table: "identities",
  select:
    "uid, parent_uid, name, description, email, email_unverified, company, relationship_kind, relationship, last_seen_time, create_time, update_time",
  orderColumns: { uid: "uid", name: "name", created_at: "create_time", updated_at: "update_time" },
};

export interface IdentityRow {
  uid: string;
  parent_uid: string | null;
  name: string;
  description: string;
  email: string;
  email_unverified: string;
  company: string;
  relationship_kind: IdentityRelationship["kind"];
  relationship: string;
  last_seen_time: number;
  create_time: number;
  update_time: number;
}

export function toRecord(row: IdentityRow): IdentityRecord {
  return {
    uid: row.uid,
    parentUid: row.parent_uid,
    name: row.name,
    description: row.description,
    email: row.email,
    emailUnverified: row.email_unverified,
    company: row.company,
    relationship:
      row.relationship_kind === "claimMatch"
        ? { kind: "claimMatch", claimMatch: JSON.parse(row.relationship) }
        : { kind: "staticKeys", staticKeys: JSON.parse(row.relationship) },
    lastSeenTime: row.last_seen_time,
    createTime: row.create_time,
    updateTime: row.update_time,
  };
}
