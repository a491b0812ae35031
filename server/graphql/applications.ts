// The developer portal in GraphQL (docs/CONTRACTS.md "Developer portal"): `applications`,
// `application(id)` with its `grants`, `createApplication`, `rotateApplicationSecret` and
// `deleteApplication`, thin adapters over server/domain/applications.ts (which uses the admin CLI's own
// client functions). Errors are the domain's ApiErrors, carried by errors.ts as `extensions.code`.
import 'reflect-metadata';
import { Arg, Ctx, Field, FieldResolver, GraphQLISODateTime, ID, InputType, Mutation, ObjectType, Query, Resolver, Root, registerEnumType } from 'type-graphql';
import type { ApiAccess as ApiAccessValue } from '../db/entities.ts';
import type { ApplicationGrantView, ApplicationView } from '../domain/applications.ts';
import type { GraphqlContext } from './context.ts';
import type { Same } from './types.ts';

export enum ApiAccess {
  NONE = 'none',
  READ = 'read',
  WRITE = 'write',
}
registerEnumType(ApiAccess, {
  name: 'ApiAccess',
  description: "What an application's access tokens may do on the tunnel API and GraphQL, never beyond the signed-in user's role: NONE (sign-in only), READ, WRITE.",
});
const _accessCovered: Same<`${ApiAccess}`, ApiAccessValue> = true;
void _accessCovered;

@ObjectType({ description: 'A user who allowed an application, with what the application itself may learn of them.' })
export class ApplicationUser {
  @Field(() => ID, { description: 'The user id (the `sub` the application receives).' })
  id!: string;

  @Field(() => String, { nullable: true, description: 'Only when the user granted the profile scope.' })
  name!: string | null;

  @Field(() => String, { nullable: true, description: 'Only when the user granted the email scope.' })
  email!: string | null;
}

@ObjectType({ description: 'A user who allowed the application and has not been signed out of it since.' })
export class ApplicationGrant {
  @Field(() => ApplicationUser)
  user!: ApplicationUser;

  @Field(() => GraphQLISODateTime, { description: 'When the user first allowed it (of the grants still live).' })
  createdAt!: Date;

  @Field(() => [String], { description: 'The scopes the user granted.' })
  scopes!: string[];
}

@ObjectType({ description: 'An OAuth application this account registered in the developer portal. Its id is the OAuth client_id.' })
export class Application {
  @Field(() => ID, { description: 'The client_id.' })
  id!: string;

  @Field()
  name!: string;

  @Field(() => [String], { description: 'Compared exactly at authorize.' })
  redirectUris!: string[];

  @Field({ description: 'A public client (browser or native app): no secret, PKCE only, no ID token.' })
  public!: boolean;

  @Field(() => ApiAccess)
  apiAccess!: ApiAccess;

  @Field(() => GraphQLISODateTime)
  createdAt!: Date;

  @Field(() => GraphQLISODateTime, { nullable: true, description: 'When the secret last changed; null for a public application.' })
  secretRotatedAt!: Date | null;
}

@ObjectType({ description: 'An application with its client secret, shown only in this answer (null for a public application).' })
export class ApplicationWithSecret {
  @Field(() => Application)
  application!: Application;

  @Field(() => String, { nullable: true, description: 'The client_secret, shown this once; null for a public application.' })
  clientSecret!: string | null;
}

@InputType()
export class CreateApplicationInput {
  @Field({ description: '1-200 characters; shown on the consent page.' })
  name!: string;

  @Field(() => [String], { description: 'Absolute https URLs (http only for 127.0.0.1, [::1] and localhost), no fragment; 1 to 20.' })
  redirectUris!: string[];

  @Field({ description: 'A public client (no secret, PKCE only, no ID token).' })
  public!: boolean;

  @Field(() => ApiAccess, { description: "At most the caller's own role allows." })
  apiAccess!: ApiAccess;
}

const toApplication = (a: ApplicationView): Application => ({
  id: a.id,
  name: a.name,
  redirectUris: a.redirect_uris,
  public: a.public,
  apiAccess: a.api_access as ApiAccess,
  createdAt: new Date(a.created_at),
  secretRotatedAt: a.secret_rotated_at === null ? null : new Date(a.secret_rotated_at),
});

const toGrant = (g: ApplicationGrantView): ApplicationGrant => ({ user: g.user, createdAt: new Date(g.created_at), scopes: g.scopes });

@Resolver(() => Application)
export class ApplicationResolver {
  @Query(() => [Application], { description: "This account's OAuth applications, oldest first (account owners only)." })
  async applications(@Ctx() ctx: GraphqlContext): Promise<Application[]> {
    const principal = await ctx.principal();
    return (await ctx.services.applications.list(principal)).map(toApplication);
  }

  @Query(() => Application, { description: "One of this account's applications; another account's is not_found." })
  async application(@Ctx() ctx: GraphqlContext, @Arg('id', () => ID) id: string): Promise<Application> {
    const principal = await ctx.principal();
    return toApplication(await ctx.services.applications.get(principal, id));
  }

  @FieldResolver(() => [ApplicationGrant], { description: 'Users who allowed this application, newest first (at most 500).' })
  async grants(@Root() application: Application, @Ctx() ctx: GraphqlContext): Promise<ApplicationGrant[]> {
    const principal = await ctx.principal();
    return (await ctx.services.applications.grants(principal, application.id)).map(toGrant);
  }

  @Mutation(() => ApplicationWithSecret, {
    description: 'Registers an application (account owner, write permission); a confidential one\'s clientSecret is in this answer only. At most 20 per account.',
  })
  async createApplication(@Ctx() ctx: GraphqlContext, @Arg('input', () => CreateApplicationInput) input: CreateApplicationInput): Promise<ApplicationWithSecret> {
    const principal = await ctx.principal();
    const created = await ctx.services.applications.create(principal, { name: input.name, redirectUris: input.redirectUris, public: input.public, apiAccess: input.apiAccess });
    return { application: toApplication(created.application), clientSecret: created.client_secret };
  }

  @Mutation(() => ApplicationWithSecret, {
    description: "Replaces a confidential application's secret; every code, token and grant of it ends at once, so its users sign in again.",
  })
  async rotateApplicationSecret(@Ctx() ctx: GraphqlContext, @Arg('id', () => ID) id: string): Promise<ApplicationWithSecret> {
    const principal = await ctx.principal();
    const rotated = await ctx.services.applications.rotateSecret(principal, id);
    return { application: toApplication(rotated.application), clientSecret: rotated.client_secret };
  }

  @Mutation(() => Boolean, { description: "Deletes one of this account's applications and everything issued to it. Returns true." })
  async deleteApplication(@Ctx() ctx: GraphqlContext, @Arg('id', () => ID) id: string): Promise<boolean> {
    const principal = await ctx.principal();
    await ctx.services.applications.delete(principal, id);
    return true;
  }
}
