//! What each subcommand does.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use conveyor_gateway::access::AccessPolicy;
use conveyor_gateway::auth::{Authenticator, JwksSource, JwtSettings, JwtVerifier, StaticTokens};
use conveyor_gateway::state::SharedLimits;
use conveyor_gateway::{AppState, HttpPolicy};
use conveyor_shared::store::StoreOptions;
use conveyor_shared::{Config, Store};
use conveyor_worker::{ToolRegistry, WorkerOptions};
use tokio_util::sync::CancellationToken;

use crate::args::{
    AuthArgs, Cli, Command, DlqCommand, EndpointArgs, GatewayArgs, OfferArgs, RedisArgs, RedisCommand,
    RedisTasksCommand, TaskLimitArgs, TasksCommand, TokenCommand, UpArgs, WorkerArgs,
};
use crate::private_redis::PrivateRedis;

/// Runs a client command (one that talks to the endpoint), if `command` is one: its exit code,
/// with the error already printed.
pub async fn run_client(command: &Command) -> Option<u8> {
    let endpoint =
        |args: &EndpointArgs| conveyor_client::Endpoint { url: args.url.clone(), token: args.token.clone() };
    let outcome = match command {
        Command::Call(args) => {
            match conveyor_client::arguments::json_flags(&args.json, args.json_args.as_deref()) {
                Ok(json) => {
                    let options = conveyor_client::call::CallOptions {
                        tool: args.tool.clone(),
                        args: args.args.clone(),
                        json_args: json.arguments,
                        json_output: json.print_json,
                        poll_ms: args.poll_ms,
                    };
                    conveyor_client::call::call(&endpoint(&args.endpoint), &options).await
                }
                Err(error) => Err(error),
            }
        }
        Command::Tasks { command } => match command {
            TasksCommand::Ls { all, json, endpoint: e } => {
                conveyor_client::tasks::ls(&endpoint(e), *all, *json).await
            }
            TasksCommand::Show { id, json, endpoint: e } => {
                conveyor_client::tasks::show(&endpoint(e), id, *json).await
            }
            TasksCommand::Watch { id, json, poll_ms, endpoint: e } => {
                conveyor_client::tasks::watch(&endpoint(e), id, *json, *poll_ms).await
            }
            TasksCommand::Cancel { id, endpoint: e } => {
                conveyor_client::tasks::cancel(&endpoint(e), id).await
            }
        },
        _ => return None,
    };
    Some(match outcome {
        Ok(exit) => exit.code(),
        Err(error) => {
            eprintln!("conveyor: {error}");
            error.exit.code()
        }
    })
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Up(args) => up(args).await,
        Command::Gateway(args) => {
            let shutdown = shutdown_on_signal();
            gateway(args, shutdown).await
        }
        Command::Worker(mut args) => {
            let shutdown = shutdown_on_signal();
            // What it offers is checked first: a worker told to offer what it cannot stops at
            // once, whether Redis answers or not.
            let registry = registry(&args.offers)?;
            resolve_shards(&mut args.redis, Some(&shutdown)).await?;
            let store = store(&args.redis)?;
            run_worker(store, registry, args, shutdown).await
        }
        // Client commands have run already, in `run_client`.
        Command::Call(_) | Command::Tasks { .. } => Ok(()),
        Command::Redis { command } => match command {
            RedisCommand::Tasks { command: RedisTasksCommand::Show { id, json, redis } } => {
                show(&redis, &id, json).await
            }
            RedisCommand::Workers { json, all, redis } => workers(&redis, json, all).await,
            RedisCommand::Dlq { command: DlqCommand::List { count, json, redis } } => {
                dlq_list(&redis, count, json).await
            }
            RedisCommand::Dlq { command: DlqCommand::Retry { id, task_ttl_ms, limits, redis } } => {
                dlq_retry(&redis, &id, task_ttl_ms, &limits).await
            }
        },
        Command::Token { command: TokenCommand::New { principal, groups } } => token_new(&principal, &groups),
        Command::Token { command: TokenCommand::Hash } => token_hash(),
    }
}

/// A token that fires on the first SIGINT or SIGTERM.
fn shutdown_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let fire = token.clone();
    tokio::spawn(async move {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            match signal(SignalKind::terminate()) {
                Ok(mut term) => {
                    tokio::select! {
                        _ = ctrl_c => {}
                        _ = term.recv() => {}
                    }
                }
                Err(_) => {
                    let _ = ctrl_c.await;
                }
            }
        }
        #[cfg(not(unix))]
        let _ = ctrl_c.await;
        tracing::info!("shutting down");
        fire.cancel();
    });
    token
}

fn store_options(redis: &RedisArgs) -> StoreOptions {
    StoreOptions {
        timeout: Duration::from_millis(redis.timeout_ms),
        outage_wait: Duration::from_millis(redis.outage_ms),
        shards: redis.shards.unwrap_or(conveyor_shared::store::DEFAULT_SHARDS),
        process: None,
        wait_replicas: redis.wait_replicas,
        wait_timeout: Duration::from_millis(redis.wait_ms),
        lean_calls: redis.lean_calls,
    }
}

fn store(redis: &RedisArgs) -> anyhow::Result<Store> {
    Store::open(&redis.url, store_options(redis)).context("cannot set up Redis")
}

/// Fills in the deployment's shard count when none was given: the one it recorded, or a new
/// deployment's for this Redis (`Store::deployment_shards`). With `waiting`, a process that
/// serves waits for Redis until it answers or the process stops; a one-off command asks once.
async fn resolve_shards(redis: &mut RedisArgs, waiting: Option<&CancellationToken>) -> anyhow::Result<()> {
    if redis.shards.is_some() {
        return Ok(());
    }
    let probe = store(redis)?;
    loop {
        match probe.deployment_shards().await {
            Ok(shards) => {
                redis.shards = Some(shards);
                return Ok(());
            }
            Err(e) => match waiting {
                None => return Err(e).context("cannot read the deployment's shard count"),
                Some(shutdown) => {
                    tracing::warn!(error = %e, "waiting for Redis");
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_secs(1)) => {}
                        () = shutdown.cancelled() => return Ok(()),
                    }
                }
            },
        }
    }
}

fn config(args: &GatewayArgs) -> Config {
    Config {
        redis_url: args.redis.url.clone(),
        task_ttl_default_ms: args.task_ttl_ms,
        task_ttl_max_ms: args.task_ttl_max_ms,
        poll_interval_ms: args.poll_interval_ms,
        max_body_bytes: args.max_body_bytes,
        json_limits: conveyor_shared::json_limits::JsonLimits {
            max_depth: args.limits.max_json_depth,
            max_parsed_bytes: args.limits.max_parsed_bytes,
        },
        max_inflight_bytes: args.limits.max_inflight_bytes,
        max_inflight_bytes_per_principal: args.limits.max_inflight_bytes_per_principal,
        max_streams_per_principal: args.limits.max_streams_per_principal,
        max_argument_bytes: args.limits.max_argument_bytes,
        header_timeout: Duration::from_millis(args.limits.header_timeout_ms),
        body_timeout: Duration::from_millis(args.limits.body_timeout_ms),
        max_connections: args.limits.max_connections,
        redis_timeout: Duration::from_millis(args.redis.timeout_ms),
        redis_outage_wait: Duration::from_millis(args.redis.outage_ms),
        shards: args.redis.shards.unwrap_or(conveyor_shared::store::DEFAULT_SHARDS),
        redis_wait_replicas: args.redis.wait_replicas,
        redis_wait_timeout: Duration::from_millis(args.redis.wait_ms),
        lean_calls: args.redis.lean_calls,
        sync_call_timeout: Duration::from_millis(args.sync_timeout_ms),
        max_dag_nodes: args.tasks.max_dag_nodes,
        max_dag_node_bytes: args.tasks.max_dag_node_bytes,
        limits: args.tasks.limits(),
        max_task_bytes: args.tasks.max_task_bytes,
    }
}

async fn gateway(mut args: GatewayArgs, shutdown: CancellationToken) -> anyhow::Result<()> {
    // A configuration that cannot run stops the gateway at once, whether Redis answers or not.
    config(&args).validate().map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
    resolve_shards(&mut args.redis, Some(&shutdown)).await?;
    let config = config(&args);
    config.validate().map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
    let store = store(&args.redis)?;
    let mut policy = HttpPolicy::default();
    policy
        .allowed_hosts
        .extend(args.allowed_hosts.iter().map(|h| h.trim().to_owned()).filter(|h| !h.is_empty()));
    if let Some(key) = &args.signing_key {
        conveyor_gateway::signing::check_secret(key)
            .map_err(|e| anyhow::anyhow!("invalid configuration: CONVEYOR_SIGNING_KEY {e}"))?;
    }
    let (auth, access) = authentication(&args.auth).await?;
    let jwt = auth.jwt.clone();
    let limits = &args.limits;
    if !(limits.rate_limit_rps >= 0.0 && limits.rate_limit_rps.is_finite()) {
        anyhow::bail!(
            "invalid configuration: CONVEYOR_RATE_LIMIT_RPS must be a number of requests per second, 0 or more"
        );
    }
    let shared_limits = SharedLimits {
        requests_per_second: limits.rate_limit_rps,
        burst: if limits.rate_limit_burst == 0 {
            (limits.rate_limit_rps * 2.0).ceil().max(1.0) as u32
        } else {
            limits.rate_limit_burst
        },
        min_poll_gap_ms: limits.min_poll_gap_ms,
    };
    let state = Arc::new(
        AppState::new(store.clone(), config, policy)
            .with_auth(auth, access)
            .with_shared_limits(shared_limits)
            .with_signing_key(args.signing_key.as_ref().map(|k| k.as_bytes().to_vec())),
    );
    if let Some(jwt) = jwt {
        // Keys are read again on schedule, so that a rotation needs no restart.
        let stop = shutdown.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(10)) => {}
                    () = stop.cancelled() => return,
                }
                if jwt.stale().await {
                    jwt.refresh().await;
                }
            }
        });
    }
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let address = listener.local_addr()?;
    tracing::info!(%address, "gateway listening: MCP at http://{address}/mcp");
    if let Some(address) = args.metrics_listen {
        let listener = metrics_listener(address, "gateway").await?;
        serve_metrics(conveyor_gateway::metrics::serve_listener(listener, state.clone(), shutdown.clone()));
    }
    // Serve at once (readiness says whether Redis answers); a deployment whose recorded shard
    // count differs from this gateway's is a configuration error that stops it.
    let stop = shutdown.clone();
    let layout = async move {
        wait_for_layout(&store, &stop).await?;
        std::future::pending::<anyhow::Result<()>>().await
    };
    tokio::select! {
        served = conveyor_gateway::serve(listener, state, async move { shutdown.cancelled().await }) => {
            served.context("the gateway stopped with an error")
        }
        refused = layout => refused,
    }
}

/// The gateway's authentication and access policy from its flags. No authentication at all is
/// a configuration error unless `--no-auth` says it is wanted.
async fn authentication(args: &AuthArgs) -> anyhow::Result<(Authenticator, AccessPolicy)> {
    let access = match &args.access_file {
        Some(path) => AccessPolicy::load(path).map_err(|e| anyhow::anyhow!("CONVEYOR_ACCESS_FILE: {e}"))?,
        None => AccessPolicy::default(),
    };
    let configured = args.tokens_file.is_some() || args.jwt_issuer.is_some() || args.jwks.is_some();
    if args.no_auth {
        if configured {
            anyhow::bail!(
                "invalid configuration: --no-auth (CONVEYOR_NO_AUTH) contradicts the tokens file or JWT settings given; drop one"
            );
        }
        tracing::warn!(
            "authentication is off (--no-auth): every caller is `anonymous`; use this on your own machine only"
        );
        return Ok((Authenticator::disabled(), access));
    }
    if !configured {
        anyhow::bail!(
            "invalid configuration: no authentication is configured. Give --tokens-file (static tokens; `conveyor token new` makes one) and/or --jwt-issuer with --jwks (OAuth 2.1 access tokens), or --no-auth to serve without authentication on your own machine"
        );
    }
    let tokens = match &args.tokens_file {
        Some(path) => StaticTokens::load(path).map_err(|e| anyhow::anyhow!("CONVEYOR_TOKENS_FILE: {e}"))?,
        None => StaticTokens::default(),
    };
    let jwt = match (&args.jwt_issuer, &args.jwks) {
        (None, None) => None,
        (Some(issuer), Some(jwks)) => {
            let mut audiences = args.jwt_audience.clone();
            if audiences.is_empty() {
                audiences.extend(args.resource_url.clone());
            }
            if audiences.is_empty() {
                anyhow::bail!(
                    "invalid configuration: JWT access tokens need an audience: set --resource-url (this endpoint's URL) or --jwt-audience"
                );
            }
            let jwks = JwksSource::parse(jwks)
                .map_err(|e| anyhow::anyhow!("invalid configuration: CONVEYOR_JWKS (--jwks): {e}"))?;
            let mut settings = JwtSettings::new(issuer.clone(), audiences, jwks);
            settings.required_scopes = args.jwt_scopes.clone();
            settings.leeway = Duration::from_secs(args.jwt_leeway_s);
            settings.principal_claim = args.jwt_principal_claim.clone();
            settings.groups_claim = args.jwt_groups_claim.clone();
            settings.bare_principals = args.jwt_bare_principals;
            if args.jwt_bare_principals && args.tokens_file.is_some() {
                tracing::warn!(
                    "--jwt-bare-principals with a tokens file: a token whose `{}` is the principal of a static token is that principal, with its tasks and rights",
                    args.jwt_principal_claim
                );
            }
            settings.refresh = Duration::from_secs(args.jwks_refresh_s.max(10));
            Some(Arc::new(
                JwtVerifier::new(settings).await.map_err(|e| anyhow::anyhow!("CONVEYOR_JWKS: {e}"))?,
            ))
        }
        _ => anyhow::bail!("invalid configuration: --jwt-issuer and --jwks go together"),
    };
    Ok((
        Authenticator {
            disabled: false,
            tokens,
            jwt,
            resource_url: args.resource_url.clone(),
            authorization_servers: args.authorization_servers.clone(),
        },
        access,
    ))
}

/// Prints a new random token and its tokens-file entry.
fn token_new(principal: &str, groups: &[String]) -> anyhow::Result<()> {
    if principal.trim().is_empty() {
        anyhow::bail!("--principal must name who the token speaks for");
    }
    let token = format!("cvt_{}{}", conveyor_shared::model::random_id(), conveyor_shared::model::random_id());
    let groups: Vec<String> = groups.iter().map(|g| format!("{g:?}")).collect();
    // The token goes to the terminal, the entry to standard output (`>> tokens.toml`).
    eprintln!("token for {principal} (hand it over now; it is stored nowhere and not shown again):");
    eprintln!("{token}");
    println!("[[token]]");
    println!("principal = {principal:?}");
    println!("groups = [{}]", groups.join(", "));
    println!("sha256 = \"{}\"", conveyor_gateway::auth::token_digest(&token));
    Ok(())
}

/// Prints the SHA-256 of the token on standard input.
fn token_hash() -> anyhow::Result<()> {
    let mut token = String::new();
    std::io::stdin().read_line(&mut token).context("cannot read a token from standard input")?;
    let token = token.trim();
    if token.is_empty() {
        anyhow::bail!("no token on standard input");
    }
    println!("{}", conveyor_gateway::auth::token_digest(token));
    Ok(())
}

/// Waits for Redis to answer, then checks that it agrees with this process's shard count; a
/// disagreement is a configuration error that waiting does not cure.
async fn wait_for_layout(store: &Store, shutdown: &CancellationToken) -> anyhow::Result<()> {
    loop {
        match store.check_layout().await {
            Ok(()) => return Ok(()),
            Err(e @ conveyor_shared::StoreError::Layout(_)) => {
                return Err(anyhow::anyhow!("invalid configuration: {e}"));
            }
            Err(e) => tracing::warn!(error = %e, "waiting for Redis"),
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
            () = shutdown.cancelled() => return Ok(()),
        }
    }
}

/// Set to 1 in the environment of a process started by a test, which may then load fixtures
/// that harm it (`crash_worker`).
const TEST_PROCESS_ENV: &str = "CONVEYOR_TEST_PROCESS";

fn registry(offers: &OfferArgs) -> anyhow::Result<Arc<ToolRegistry>> {
    let (fixtures, only) = (offers.fixtures, &offers.tools);
    let roots = conveyor_tools::roots::Roots::parse(&offers.roots)
        .map_err(|e| anyhow::anyhow!("--root (CONVEYOR_ROOTS): {e}"))?;
    let operator = match &offers.tools_file {
        Some(path) => conveyor_tools::operator_config::load(path).map_err(|e| anyhow::anyhow!("{e}"))?,
        None => Default::default(),
    };
    for (name, root) in operator
        .tools
        .iter()
        .filter_map(|t| t.root.as_ref().map(|r| (&t.name, r)))
        .chain(operator.profiles.values().flat_map(|p| p.checks.iter().map(|c| (&c.name, &c.root))))
    {
        roots.get(root).map_err(|e| anyhow::anyhow!("tools file: `{name}` runs in root `{root}`: {e}"))?;
    }
    let settings = conveyor_tools::Settings { roots, operator: Arc::new(operator) };
    let mut registry = ToolRegistry::new();
    if fixtures {
        conveyor_worker::fixtures::register(&mut registry);
        // Fixtures that harm the process that runs them load only in a process that says it is
        // a test one, so that `--fixtures` on a shared deployment cannot be used to kill workers.
        if std::env::var(TEST_PROCESS_ENV).is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true")) {
            conveyor_worker::fixtures::register_harmful(&mut registry);
        } else if only.iter().any(|t| conveyor_worker::fixtures::HARMFUL.contains(&t.as_str())) {
            anyhow::bail!(
                "the fixtures {:?} harm the process that runs them and load only in a test process ({TEST_PROCESS_ENV}=1)",
                conveyor_worker::fixtures::HARMFUL
            );
        }
    }
    // After the fixtures, so that a probe that calls the first listed tool gets a quick one.
    conveyor_tools::register(&mut registry, &settings);
    if !only.is_empty() {
        registry = registry.only(only).map_err(|e| anyhow::anyhow!("CONVEYOR_TOOLS: {e}"))?;
    }
    Ok(Arc::new(registry))
}

/// A worker over an already built registry (`up` builds it once for all its workers).
async fn run_worker(
    store: Store,
    registry: Arc<ToolRegistry>,
    args: WorkerArgs,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    if !registry.has_tools() {
        tracing::warn!(
            "this worker offers no tools: start it with --fixtures, or build one with your own tools"
        );
    }
    let mut options = WorkerOptions::new(args.concurrency);
    if let Some(name) = &args.name {
        anyhow::ensure!(
            !name.is_empty()
                && name.len() <= 128
                && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')),
            "CONVEYOR_WORKER_NAME must be 1 to 128 letters, digits, '.', '_' or '-'; got {name:?}"
        );
        options.name = name.clone();
    }
    options.shutdown_grace = Duration::from_millis(args.shutdown_grace_ms);
    anyhow::ensure!(args.lease_ms >= 300, "CONVEYOR_LEASE_MS must be at least 300 ms");
    options.lease = Duration::from_millis(args.lease_ms);
    options.max_losses = args.max_node_losses;
    anyhow::ensure!(
        args.nodes.max_node_argument_bytes >= 1024 && args.nodes.max_node_output_bytes >= 1024,
        "CONVEYOR_MAX_NODE_ARGUMENT_BYTES and CONVEYOR_MAX_NODE_OUTPUT_BYTES must be at least 1024"
    );
    anyhow::ensure!(
        args.nodes.principal_share > 0.0 && args.nodes.principal_share <= 1.0,
        "CONVEYOR_PRINCIPAL_SHARE must be more than 0 and at most 1 (1: no share)"
    );
    options.principal_share = args.nodes.principal_share;
    options.node_limits = conveyor_worker::NodeLimits {
        max_argument_bytes: args.nodes.max_node_argument_bytes,
        max_output_bytes: args.nodes.max_node_output_bytes,
    };
    if let Some(address) = args.metrics_listen {
        let listener = metrics_listener(address, "worker").await?;
        serve_metrics(conveyor_worker::http::serve(listener, store.clone(), shutdown.clone()));
    }
    conveyor_worker::run(store, registry, options, shutdown).await.context("the worker stopped with an error")
}

/// Binds a process's metrics listener (`--metrics-listen`) and says where it is.
async fn metrics_listener(address: SocketAddr, process: &str) -> anyhow::Result<tokio::net::TcpListener> {
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("cannot listen on {address}"))?;
    let address = listener.local_addr()?;
    tracing::info!(%address, "{process} metrics at http://{address}/metrics");
    Ok(listener)
}

/// Serves a metrics listener beside the process's work; its end is logged, never fatal.
fn serve_metrics(served: impl std::future::Future<Output = std::io::Result<()>> + Send + 'static) {
    tokio::spawn(async move {
        if let Err(e) = served.await {
            tracing::warn!(error = %e, "the metrics listener stopped");
        }
    });
}

async fn up(mut args: UpArgs) -> anyhow::Result<()> {
    config(&args.gateway).validate().map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
    let shutdown = shutdown_on_signal();
    let probe = store(&args.gateway.redis)?;
    // Held until `up` returns: dropping it stops the private server.
    let mut private = None;
    if probe.ping().await.is_err() {
        let redis = PrivateRedis::start().await?;
        eprintln!(
            "conveyor: no Redis answered at {}; started a private redis-server at {} (nothing is kept; it stops when conveyor does)",
            args.gateway.redis.url, redis.url
        );
        args.gateway.redis.url = redis.url.clone();
        private = Some(redis);
    }
    resolve_shards(&mut args.gateway.redis, Some(&shutdown)).await?;
    let store = store(&args.gateway.redis)?;
    // Built before anything is served: a tools file the workers refuse stops `up` at once, with
    // its error, instead of leaving a gateway without workers.
    let registry = registry(&args.offers)?;
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..args.workers {
        let worker_args = WorkerArgs {
            concurrency: args.concurrency,
            offers: args.offers.clone(),
            shutdown_grace_ms: 30_000,
            lease_ms: 30_000,
            max_node_losses: 3,
            // The gateway's /metrics shows these workers' metrics: one registry per process.
            metrics_listen: None,
            nodes: args.nodes.clone(),
            redis: args.gateway.redis.clone(),
            name: None,
        };
        workers.spawn(run_worker(store.clone(), registry.clone(), worker_args, shutdown.clone()));
    }
    // Serve once this process's workers have announced themselves, so that the first tools/list
    // already lists their tools.
    let expected = args.workers;
    let ready = async {
        loop {
            // A heartbeat is Redis's time: judged by Redis's clock, not this process's.
            if let Ok((_, live, now)) = store.catalog().await
                && live.iter().filter(|w| w.is_live(now)).count() >= expected
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::select! {
        announced = tokio::time::timeout(Duration::from_secs(10), ready) => {
            if announced.is_err() {
                tracing::warn!("the workers have not announced themselves yet; serving anyway");
            }
        }
        Some(stopped) = workers.join_next() => return stop_up(stopped, &shutdown, workers).await,
    }
    let served = gateway(args.gateway, shutdown.clone());
    tokio::pin!(served);
    // A worker that stops while the gateway serves (it cannot run at all) stops `up` with its
    // error: a gateway whose workers are gone would take calls that nothing runs.
    let served = tokio::select! {
        served = &mut served => served,
        Some(stopped) = workers.join_next() => {
            let stopped = stop_up(stopped, &shutdown, workers).await;
            let _ = served.await;
            return stopped;
        }
    };
    shutdown.cancel();
    while let Some(stopped) = workers.join_next().await {
        stopped.context("a worker panicked")??;
    }
    drop(private);
    served
}

/// `up` after one of its workers stopped on its own: the others and the gateway stop too, and
/// the worker's error is `up`'s.
async fn stop_up(
    stopped: Result<anyhow::Result<()>, tokio::task::JoinError>,
    shutdown: &CancellationToken,
    mut others: tokio::task::JoinSet<anyhow::Result<()>>,
) -> anyhow::Result<()> {
    shutdown.cancel();
    while others.join_next().await.is_some() {}
    match stopped {
        Ok(Err(e)) => Err(e),
        Ok(Ok(())) => Err(anyhow::anyhow!("a worker stopped before conveyor was asked to stop")),
        Err(e) => Err(anyhow::anyhow!("a worker panicked: {e}")),
    }
}

async fn show(redis: &RedisArgs, id: &str, json: bool) -> anyhow::Result<()> {
    let mut redis = redis.clone();
    resolve_shards(&mut redis, None).await?;
    let redis = &redis;
    let store = store(redis)?;
    let task = store
        .get_task(id)
        .await?
        .with_context(|| format!("no task `{id}` (unknown, or expired after its TTL)"))?;
    let nodes = store.get_nodes(id).await?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&conveyor_shared::store::task_summary(
                &task.status_record(),
                &nodes
            ))?
        );
        return Ok(());
    }
    println!("task      {}", task.task_id);
    println!("tool      {}", task.tool);
    println!(
        "status    {}{}",
        task.status,
        task.status_message.map(|m| format!(" ({m})")).unwrap_or_default()
    );
    println!("owner     {}", task.owner);
    println!("created   {}", conveyor_shared::model::iso8601(task.created_at_ms));
    println!("updated   {}", conveyor_shared::model::iso8601(task.updated_at_ms));
    if let (Some(p), Some(t)) = (task.progress, task.total) {
        println!("progress  {p} of {t}");
    }
    println!();
    println!("{:<20} {:<10} {:>8} {:>10}  worker", "node", "status", "attempts", "duration");
    for node in nodes {
        let duration = match (node.started_at_ms, node.finished_at_ms) {
            (Some(s), Some(f)) => format!("{} ms", f.saturating_sub(s)),
            (Some(_), None) => "running".to_owned(),
            _ => "-".to_owned(),
        };
        println!(
            "{:<20} {:<10} {:>8} {:>10}  {}",
            node.node_id,
            node.status,
            node.attempt,
            duration,
            node.worker.unwrap_or_default()
        );
    }
    Ok(())
}

async fn workers(redis: &RedisArgs, json: bool, all: bool) -> anyhow::Result<()> {
    let mut redis = redis.clone();
    resolve_shards(&mut redis, None).await?;
    let redis = &redis;
    let (_, mut workers, now) = store(redis)?.catalog().await?;
    workers.sort_by(|a, b| a.name.cmp(&b.name));
    let workers: Vec<_> = workers.into_iter().filter(|w| all || w.is_live(now)).collect();
    if json {
        println!("{}", serde_json::to_string_pretty(&workers)?);
        return Ok(());
    }
    if workers.is_empty() {
        println!("no live workers");
        return Ok(());
    }
    for w in workers {
        let age = now.saturating_sub(w.heartbeat_ms) as f64 / 1000.0;
        let state = if w.is_live(now) { "live" } else { "silent" };
        println!(
            "{}  {state}, heartbeat {age:.1} s ago, {} of {} slots busy, pid {} on {}",
            w.name,
            w.running.len(),
            w.concurrency,
            w.pid,
            if w.host.is_empty() { "?" } else { &w.host }
        );
        println!("  queues  {}", w.queues.join(", "));
        println!("  tools   {}", w.tools.join(", "));
        for node in &w.running {
            let secs = now.saturating_sub(node.started_at_ms) as f64 / 1000.0;
            println!(
                "  running {} {} ({}, attempt {}, {secs:.1} s)",
                node.task_id, node.node_id, node.tool, node.attempt
            );
        }
    }
    Ok(())
}

async fn dlq_list(redis: &RedisArgs, count: usize, json: bool) -> anyhow::Result<()> {
    let mut redis = redis.clone();
    resolve_shards(&mut redis, None).await?;
    let redis = &redis;
    let letters = store(redis)?.dead_letters(count).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&letters)?);
        return Ok(());
    }
    if letters.is_empty() {
        println!("no dead letters");
        return Ok(());
    }
    println!(
        "{:<18} {:<24} {:<32} {:<12} {:<20} {:>8}  last error",
        "id", "at", "task", "node", "tool", "attempts"
    );
    for l in letters {
        let error = l
            .error
            .get("message")
            .and_then(|m| m.as_str())
            .map(str::to_owned)
            .unwrap_or_else(|| l.error.to_string());
        println!(
            "{:<18} {:<24} {:<32} {:<12} {:<20} {:>8}  {}",
            l.id,
            conveyor_shared::model::iso8601(l.at_ms),
            l.task_id,
            l.node_id,
            l.tool,
            l.attempts,
            error
        );
    }
    Ok(())
}

async fn dlq_retry(redis: &RedisArgs, id: &str, ttl_ms: u64, limits: &TaskLimitArgs) -> anyhow::Result<()> {
    let mut redis = redis.clone();
    resolve_shards(&mut redis, None).await?;
    let redis = &redis;
    let store = store(redis)?;
    let letter = store
        .dead_letter(id)
        .await?
        .with_context(|| format!("no dead letter `{id}`; `conveyor redis dlq list` shows them"))?;
    let retry = conveyor_shared::store::dead_letters::RetryOptions {
        ttl_ms,
        poll_interval_ms: 1000,
        limits: limits.limits(),
        max_task_bytes: limits.max_task_bytes,
        plan_limits: limits.dag_limits(),
    };
    match store.retry_dead_letter(&letter, &retry).await? {
        Ok(task) => {
            println!("{task}");
            eprintln!(
                "conveyor: dead letter {id} ({} of task {}) runs again as task {task}",
                letter.node_id, letter.task_id
            );
            Ok(())
        }
        Err(reason) => anyhow::bail!("cannot retry dead letter {id}: {reason}"),
    }
}
