import type { AccountAssociationOrder, AccountAssociationRecord, AccountProviders } from "../store.js";
import { type TableSpec } from "./table.js";

/** The account associations table as both engines read it: its list spec, row and record. */
export const TABLE: TableSpec<AccountAssociationOrder> = {
  table: "account_associations",
  select: "uid, name, description, providers, create_time, update_time",
  orderColumns: { group: "uid", uid: "uid", name: "name", created_at: "create_time", updated_at: "update_time" },
};

export interface AccountAssociationRow {
  uid: string;
  name: string;
  description: string;
  providers: string;
  create_time: number;
  update_time: number;
}

export function toRecord(row: AccountAssociationRow): AccountAssociationRecord {
  return {
    uid: row.uid,
    name: row.name,
    description: row.description,
    providers: JSON.parse(row.providers) as AccountProviders,
    createTime: row.create_time,
    updateTime: row.update_time,
  };
}
