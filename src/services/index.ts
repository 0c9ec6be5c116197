import type { DescFile } from "@bufbuild/protobuf";
import { file_google_rpc_error_details } from "../../gen/google/rpc/error_details_pb.js";
import { AuthService, file_platformapi_auth_v1_auth } from "../../gen/platformapi/auth/v1/auth_pb.js";
import { EventsService, file_platformapi_events_v1_events } from "../../gen/platformapi/events/v1/events_pb.js";
import { file_platformapi_events_v1_subscriptions, SubscriptionsService } from "../../gen/platformapi/events/v1/subscriptions_pb.js";
import { file_platformapi_iam_v1_groups, GroupsService as GroupsV1Service } from "../../gen/platformapi/iam/v1/groups_pb.js";
import {
  AccountAssociationsService,
  file_platformapi_iam_v2beta1_account_associations,
} from "../../gen/platformapi/iam/v2beta1/account_associations_pb.js";
import { file_platformapi_iam_v2beta1_group_invites, GroupInvitesService } from "../../gen/platformapi/iam/v2beta1/group_invites_pb.js";
import { file_platformapi_iam_v2beta1_groups, GroupsService } from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import { file_platformapi_iam_v2beta1_identities, IdentitiesService } from "../../gen/platformapi/iam/v2beta1/identities_pb.js";
import {
  file_platformapi_iam_v2beta1_identity_providers,
  IdentityProvidersService,
} from "../../gen/platformapi/iam/v2beta1/identity_providers_pb.js";
import { file_platformapi_iam_v2beta1_role_bindings, RoleBindingsService } from "../../gen/platformapi/iam/v2beta1/role_bindings_pb.js";
import { file_platformapi_iam_v2beta1_roles, RolesService } from "../../gen/platformapi/iam/v2beta1/roles_pb.js";
import { file_platformapi_oidc_v1_sts, SecurityTokenService } from "../../gen/platformapi/oidc/v1/sts_pb.js";
import { file_platformapi_registry_v1_registry, RegistryService } from "../../gen/platformapi/registry/v1/registry_pb.js";
import { file_platformapi_registry_v2beta1_repos, ReposService } from "../../gen/platformapi/registry/v2beta1/repos_pb.js";
import { file_platformapi_registry_v2beta1_tags, TagsService } from "../../gen/platformapi/registry/v2beta1/tags_pb.js";
import {
  AdvisoriesService,
  file_platformapi_vulnerabilities_v2beta1_advisories,
} from "../../gen/platformapi/vulnerabilities/v2beta1/advisories_pb.js";
import { createAuthService } from "./auth/auth.js";
import { bind, type ServiceBinding } from "./binding.js";
import type { ServiceDeps } from "./context.js";
import { createEventsService } from "./events/events.js";
import { createSubscriptionsService } from "./events/subscriptions.js";
import { createGroupsV1Service } from "./iam-v1/groups.js";
import { createAccountAssociationsService } from "./iam/account-associations.js";
import { createGroupInvitesService } from "./iam/group-invites.js";
import { createGroupsService } from "./iam/groups.js";
import { createIdentitiesService } from "./iam/identities.js";
import { createIdentityProvidersService } from "./iam/identity-providers.js";
import { createRoleBindingsService } from "./iam/role-bindings.js";
import { createRolesService } from "./iam/roles.js";
import { createStsService } from "./oidc/sts.js";
import { createRegistryV1Service } from "./registry-v1/registry.js";
import { createReposService } from "./registry/repos.js";
import { createTagsService } from "./registry/tags.js";
import { createAdvisoriesService } from "./vulnerabilities/advisories.js";

/** Every proto file of the contract: the source of the JSON registry and of reflection. */
export const CONTRACT_FILES: readonly DescFile[] = [
  file_platformapi_iam_v2beta1_groups,
  file_platformapi_iam_v2beta1_identities,
  file_platformapi_iam_v2beta1_roles,
  file_platformapi_iam_v2beta1_role_bindings,
  file_platformapi_iam_v2beta1_identity_providers,
  file_platformapi_iam_v2beta1_account_associations,
  file_platformapi_iam_v2beta1_group_invites,
  file_platformapi_registry_v2beta1_repos,
  file_platformapi_registry_v2beta1_tags,
  file_platformapi_vulnerabilities_v2beta1_advisories,
  file_platformapi_iam_v1_groups,
  file_platformapi_registry_v1_registry,
  file_platformapi_auth_v1_auth,
  file_platformapi_oidc_v1_sts,
  file_platformapi_events_v1_events,
  file_platformapi_events_v1_subscriptions,
  file_google_rpc_error_details,
];

/** The implemented services, each bound to its implementation. */
export function createServiceBindings(deps: ServiceDeps): ServiceBinding[] {
  return [
    bind(GroupsService, createGroupsService(deps)),
    bind(IdentitiesService, createIdentitiesService(deps)),
    bind(RolesService, createRolesService(deps)),
    bind(RoleBindingsService, createRoleBindingsService(deps)),
    bind(IdentityProvidersService, createIdentityProvidersService(deps)),
    bind(AccountAssociationsService, createAccountAssociationsService(deps)),
    bind(GroupInvitesService, createGroupInvitesService(deps)),
    bind(AdvisoriesService, createAdvisoriesService(deps)),
    bind(ReposService, createReposService(deps)),
    bind(TagsService, createTagsService(deps)),
    bind(GroupsV1Service, createGroupsV1Service(deps)),
    bind(RegistryService, createRegistryV1Service(deps)),
    bind(SecurityTokenService, createStsService(deps)),
    bind(AuthService, createAuthService(deps)),
    bind(EventsService, createEventsService(deps)),
    bind(SubscriptionsService, createSubscriptionsService(deps)),
  ];
}
