import type { IdentityProviderOrder, IdentityProviderRecord, OidcSettings } from "../store.js";
import { type TableSpec } from "./table.js";

/** The identity providers table as both engines read it: its list spec, row and record. */
export const TABLE: TableSpec<IdentityProviderOrder> = {
  table: "identity_providers",
  select: "uid, parent_uid, name, description, default_role, oidc, create_time, update_time",
  orderColumns: { uid: "uid", name: "name", created_at: "create_time", updated_at: "update_time" },
};

export interface IdentityProviderRow {
  uid: string;
  parent_uid: string;
  name: string;
  description: string;
  default_role: string;
  oidc: string;
  create_time: number;
  update_time: number;
}

export function toRecord(row: IdentityProviderRow): IdentityProviderRecord {
  return {
    uid: row.uid,
    parentUid: row.parent_uid,
    name: row.name,
    description: row.description,
    defaultRole: row.default_role,
    oidc: JSON.parse(row.oidc) as OidcSettings,
    createTime: row.create_time,
    updateTime: row.update_time,
  };
}
