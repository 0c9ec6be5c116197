import { create, createRegistry, toBinary, type DescFile } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import {
  ServerReflectionResponseSchema,
  ServiceResponseSchema,
  type ServerReflectionRequest,
  type ServerReflectionResponse,
  type ServiceResponse,
} from "../../../gen/grpc/reflection/v1/reflection_pb.js";

/** gRPC code NOT_FOUND, as reflection's ErrorResponse carries it. */
const NOT_FOUND = 5;

/** A file as reflection sends it: its FileDescriptorProto, encoded once at start, and the files it imports. */
interface EncodedFile {
  readonly bytes: Uint8Array;
  readonly imports: readonly string[];
}

/**
 * What reflection serves, indexed at start so that every answer is a few map
 * lookups: encoding a descriptor per request (descriptor.proto: 13 KB, about
 * 1.4 ms) or scanning the registry made each small request cost the event loop
 * a thousand times what it cost the client.
 */
export interface ReflectionSchema {
  /** Every file by its proto name ("google/protobuf/descriptor.proto"), as file_by_filename and imports name it. */
  readonly files: ReadonlyMap<string, EncodedFile>;
  /** The file declaring each fully-qualified name: types, services, extensions and their members (fields, oneofs, values, methods). */
  readonly fileOfSymbol: ReadonlyMap<string, string>;
  /** Message type names: all_extension_numbers_of_type answers NOT_FOUND for anything else. */
  readonly messages: ReadonlySet<string>;
  /** Extensions by extendee type name, then by field number: the file declaring each. */
  readonly extensions: ReadonlyMap<string, ReadonlyMap<number, string>>;
  /** list_services' answer, shared by every stream (answers are never mutated). */
  readonly services: readonly ServiceResponse[];
}

/**
 * Answers grpc.reflection.v1 (and the wire-identical v1alpha) requests from a
 * ReflectionSchema. One Reflector serves one stream: each file is sent at most
 * once per stream, with its transitive imports.
 */
export class Reflector {
  private readonly sent = new Set<string>();

  constructor(private readonly schema: ReflectionSchema) {}

  answer(req: ServerReflectionRequest): ServerReflectionResponse {
    const base = { validHost: req.host, originalRequest: req };
    const r = req.messageRequest;
    const s = this.schema;
    switch (r.case) {
      case "listServices":
        return create(ServerReflectionResponseSchema, {
          ...base,
          messageResponse: { case: "listServicesResponse", value: { service: [...s.services] } },
        });
      case "fileByFilename":
        return this.files(base, r.value, `file ${r.value} not found`);
      case "fileContainingSymbol":
        return this.files(base, s.fileOfSymbol.get(r.value), `symbol ${r.value} not found`);
      case "fileContainingExtension": {
        const file = s.extensions.get(r.value.containingType)?.get(r.value.extensionNumber);
        return this.files(base, file, `extension ${r.value.extensionNumber} of ${r.value.containingType} not found`);
      }
      case "allExtensionNumbersOfType": {
        if (!s.messages.has(r.value)) return this.error(base, `type ${r.value} not found`);
        const numbers = [...(s.extensions.get(r.value)?.keys() ?? [])];
        return create(ServerReflectionResponseSchema, {
          ...base,
          messageResponse: { case: "allExtensionNumbersResponse", value: { baseTypeName: r.value, extensionNumber: numbers } },
        });
      }
      default:
        return this.error(base, "unsupported reflection request");
    }
  }

  private files(base: object, name: string | undefined, missing: string): ServerReflectionResponse {
    const files = this.schema.files;
    if (name === undefined || !files.has(name)) return this.error(base, missing);
    const out: Uint8Array[] = [];
    const visit = (n: string) => {
      const file = files.get(n);
      if (!file || this.sent.has(n)) return;
      this.sent.add(n);
      out.push(file.bytes);
      file.imports.forEach(visit);
    };
    // The requested file always goes out, even if sent before on this stream.
    this.sent.delete(name);
    visit(name);
    return create(ServerReflectionResponseSchema, {
      ...base,
      messageResponse: { case: "fileDescriptorResponse", value: { fileDescriptorProto: out } },
    });
  }

  private error(base: object, message: string): ServerReflectionResponse {
    return create(ServerReflectionResponseSchema, {
      ...base,
      messageResponse: { case: "errorResponse", value: { errorCode: NOT_FOUND, errorMessage: message } },
    });
  }
}

/** Indexes the given files, all their imports and the service names, encoding each descriptor once. */
export function reflectionSchema(roots: readonly DescFile[], serviceNames: readonly string[]): ReflectionSchema {
  const all = new Map<string, DescFile>();
  const visit = (f: DescFile) => {
    // DescFile.name has no ".proto"; clients name files by their proto name.
    if (all.has(f.proto.name)) return;
    all.set(f.proto.name, f);
    f.dependencies.forEach(visit);
  };
  roots.forEach(visit);
  const files = new Map<string, EncodedFile>();
  for (const [name, f] of all) {
    files.set(name, { bytes: toBinary(FileDescriptorProtoSchema, f.proto), imports: f.dependencies.map((d) => d.proto.name) });
  }
  const fileOfSymbol = new Map<string, string>();
  const messages = new Set<string>();
  const extensions = new Map<string, Map<number, string>>();
  for (const d of createRegistry(...all.values())) {
    const file = d.file.proto.name;
    const members: string[] = [];
    switch (d.kind) {
      case "message":
        messages.add(d.typeName);
        members.push(...d.fields.map((f) => f.name), ...d.oneofs.map((o) => o.name));
        break;
      case "enum": {
        // protobuf scopes values next to their enum; "pkg.Enum.VALUE" is answered too, as grpcurl users type it.
        const scope = d.typeName.slice(0, Math.max(0, d.typeName.lastIndexOf(".")));
        for (const v of d.values) fileOfSymbol.set(scope ? `${scope}.${v.name}` : v.name, file);
        members.push(...d.values.map((v) => v.name));
        break;
      }
      case "service":
        members.push(...d.methods.map((m) => m.name));
        break;
      case "extension": {
        let numbers = extensions.get(d.extendee.typeName);
        if (!numbers) extensions.set(d.extendee.typeName, (numbers = new Map()));
        numbers.set(d.number, file);
        break;
      }
    }
    fileOfSymbol.set(d.typeName, file);
    for (const m of members) fileOfSymbol.set(`${d.typeName}.${m}`, file);
  }
  const services = serviceNames.map((name) => create(ServiceResponseSchema, { name }));
  return { files, fileOfSymbol, messages, extensions, services };
}
