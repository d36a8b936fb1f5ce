//! Authentication, as an OAuth 2.1 resource server and with static tokens; tasks bound to their
//! principal; tools granted per group; operators who see and cancel every task; an audit log.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use conveyor_gateway::auth::token_digest;
use conveyor_tests::mcp::tasks_client_capabilities;
use conveyor_tests::process::{conveyor_bin, scratch_dir, workspace_root};
use conveyor_tests::{Conveyor, Mcp, RedisServer};
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

const ALICE: &str = "alice-token-0123456789abcdef";
const BOB: &str = "bob-token-9876543210fedcba";
const OPS: &str = "ops-token-aaaabbbbccccdddd";

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write a test file");
    path
}

fn tokens_file(dir: &Path) -> PathBuf {
    let entry = |principal: &str, groups: &str, token: &str| {
        format!(
            "[[token]]\nprincipal = \"{principal}\"\ngroups = [{groups}]\nsha256 = \"{}\"\n\n",
            token_digest(token)
        )
    };
    let text = [entry("alice", "\"research\"", ALICE), entry("bob", "", BOB), entry("olga", "\"ops\"", OPS)]
        .concat();
    write(dir, "tokens.toml", &text)
}

/// A 30 s `slow_compute` task of the caller, once the worker offers the tool; its id.
async fn start_slow_task(mcp: &Mcp) -> String {
    mcp.wait_for_tool("slow_compute", Duration::from_secs(10)).await.expect("fixtures");
    let created = mcp
        .call_2025("tools/call", json!({"name": "slow_compute", "arguments": {"seconds": 30}, "task": {}}))
        .await
        .expect("tools/call");
    created.result()["task"]["taskId"].as_str().unwrap_or_else(|| panic!("{}", created.raw)).to_owned()
}

/// `conveyor up` with the fixtures, the three tokens of [`tokens_file`] and this access file.
fn up_with_tokens(redis: &RedisServer, name: &str, access: &str) -> Conveyor {
    let dir = scratch_dir(name);
    let tokens = tokens_file(&dir);
    let access = write(&dir, "access.toml", access);
    let tokens = tokens.to_str().expect("path");
    let access = access.to_str().expect("path");
    Conveyor::up(&redis.url(), &["--fixtures", "--tokens-file", tokens, "--access-file", access])
        .expect("conveyor")
}

#[tokio::test]
async fn tasks_belong_to_their_principal_and_operators_see_and_cancel_them_all() {
    let redis = RedisServer::start().expect("redis");
    let conveyor = up_with_tokens(&redis, "auth-static", "operators = [\"group:ops\"]\n");
    let anonymous = Mcp::new(conveyor.mcp_url());
    let alice = Mcp::new(conveyor.mcp_url()).with_api_key(ALICE);
    let bob = Mcp::new(conveyor.mcp_url()).with_api_key(BOB);
    let olga = Mcp::new(conveyor.mcp_url()).with_api_key(OPS);

    let refused = anonymous.call_2025("tools/list", json!({})).await.expect("reply");
    assert_eq!(refused.status, 401, "{}", refused.raw);
    assert!(refused.raw.contains("Authorization"), "says what to send: {}", refused.raw);
    let wrong = Mcp::new(conveyor.mcp_url()).with_api_key("not-a-token-at-all-000");
    assert_eq!(wrong.call_2025("tools/list", json!({})).await.expect("reply").status, 401);
    assert_eq!(anonymous.get_status("/healthz").await.expect("healthz"), 200, "probes need no token");

    let task = start_slow_task(&alice).await;
    assert_eq!(
        alice.call_2025("tasks/get", json!({"taskId": task})).await.expect("get").result()["status"],
        "working"
    );
    for (method, params) in [
        ("tasks/get", json!({"taskId": task})),
        ("tasks/cancel", json!({"taskId": task})),
        ("tasks/result", json!({"taskId": task})),
    ] {
        let reply = bob.call_2025(method, params).await.expect("reply");
        assert_eq!(
            reply.error_code(),
            Some(-32602),
            "bob's {method} must not find alice's task: {}",
            reply.raw
        );
    }
    let reply = bob
        .call_2026("tasks/get", json!({"taskId": task}), tasks_client_capabilities())
        .await
        .expect("reply");
    assert_eq!(reply.error_code(), Some(-32602), "{}", reply.raw);
    assert_eq!(bob.call_2025("tasks/list", json!({})).await.expect("list").result()["tasks"], json!([]));
    let alices = alice.call_2025("tasks/list", json!({})).await.expect("list");
    assert_eq!(alices.result()["tasks"][0]["taskId"], task.as_str(), "{}", alices.raw);

    // An operator sees every principal's live tasks, reads any of them, and cancels them.
    let listed = olga.call_2025("tasks/list", json!({})).await.expect("list");
    assert!(listed.raw.contains(&task), "the operator lists alice's task: {}", listed.raw);
    assert_eq!(
        olga.call_2025("tasks/get", json!({"taskId": task})).await.expect("get").result()["status"],
        "working"
    );
    let cancelled = olga.call_2025("tasks/cancel", json!({"taskId": task})).await.expect("cancel");
    assert_eq!(cancelled.result()["status"], "cancelled", "{}", cancelled.raw);
    assert_eq!(
        alice.call_2025("tasks/get", json!({"taskId": task})).await.expect("get").result()["status"],
        "cancelled"
    );

    // The audit log names who did what to which task, and every refusal.
    let log = conveyor.log_text();
    let audit: Vec<&str> = log.lines().filter(|l| l.contains("conveyor::audit")).collect();
    let has = |words: &[&str]| audit.iter().any(|l| words.iter().all(|w| l.contains(w)));
    assert!(has(&["task_created", "alice", "slow_compute", &task]), "{audit:#?}");
    assert!(has(&["task_cancelled", "olga", &task]), "{audit:#?}");
    assert!(has(&["denied", "bob", &task]), "{audit:#?}");
    assert!(has(&["denied", "not authenticated"]), "{audit:#?}");
}

#[tokio::test]
async fn tools_are_granted_per_principal_and_group() {
    let redis = RedisServer::start().expect("redis");
    let access = "default = \"deny\"\n[[rule]]\ntools = [\"slow_*\", \"run_dag\"]\nallow = [\"group:research\"]\n[[rule]]\ntools = [\"echo\"]\nallow = [\"bob\", \"group:research\"]\n";
    let conveyor = up_with_tokens(&redis, "auth-access", access);
    let alice = Mcp::new(conveyor.mcp_url()).with_api_key(ALICE);
    let bob = Mcp::new(conveyor.mcp_url()).with_api_key(BOB);
    alice.wait_for_tool("slow_compute", Duration::from_secs(10)).await.expect("fixtures");
    let names = |reply: &conveyor_tests::mcp::Reply| -> Vec<String> {
        let mut names: Vec<String> = reply.result()["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .filter_map(|t| t["name"].as_str().map(str::to_owned))
            .collect();
        names.sort();
        names
    };
    let alices = names(&alice.call_2025("tools/list", json!({})).await.expect("list"));
    assert_eq!(alices, ["echo", "run_dag", "slow_compute"], "alice sees what her group is granted");
    let bobs = names(&bob.call_2025("tools/list", json!({})).await.expect("list"));
    assert_eq!(bobs, ["echo"]);

    let written = redis.task_count();
    let refused = bob
        .call_2025("tools/call", json!({"name": "slow_compute", "arguments": {"seconds": 1}, "task": {}}))
        .await
        .expect("reply");
    assert_eq!(refused.error_code(), Some(-32602), "{}", refused.raw);
    // A graph cannot smuggle in a tool the caller may not call.
    let graph = json!({"nodes": [{"id": "a", "tool": "greet", "arguments": {"name": "x"}}]});
    let refused = alice
        .call_2025("tools/call", json!({"name": "run_dag", "arguments": graph, "task": {}}))
        .await
        .expect("reply");
    assert_eq!(refused.error_code(), Some(-32602), "{}", refused.raw);
    assert!(refused.raw.contains("greet"), "{}", refused.raw);
    assert_eq!(redis.task_count(), written, "nothing was written for refused calls");
    let fine =
        bob.call_2025("tools/call", json!({"name": "echo", "arguments": {"x": 1}})).await.expect("echo");
    assert_eq!(fine.result()["structuredContent"], json!({"x": 1}), "{}", fine.raw);
    let log = conveyor.log_text();
    assert!(
        log.lines().any(|l| l.contains("conveyor::audit")
            && l.contains("denied")
            && l.contains("bob")
            && l.contains("slow_compute")),
        "{log}"
    );
}

const ISSUER: &str = "https://auth.example.test";
const RESOURCE: &str = "https://conveyor.example.test/mcp";

fn key_pem(name: &str) -> Vec<u8> {
    std::fs::read(workspace_root().join("tests/fixtures/jwt").join(format!("{name}-test-key.pem")))
        .expect("test key")
}

fn jwks(keys: &[(&str, &str)]) -> String {
    let keys = keys
        .iter()
        .map(|(name, kid)| {
            let key = EncodingKey::from_rsa_pem(&key_pem(name)).expect("RSA key");
            let mut jwk = Jwk::from_encoding_key(&key, Algorithm::RS256).expect("JWK");
            jwk.common.key_id = Some((*kid).to_owned());
            jwk
        })
        .collect();
    serde_json::to_string(&JwkSet { keys }).expect("JWKS")
}

fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_secs() as i64
}

fn claims(subject: &str) -> Value {
    json!({"iss": ISSUER, "aud": RESOURCE, "sub": subject, "exp": now() + 300, "nbf": now() - 5,
           "iat": now(), "scope": "mcp other", "groups": ["research"]})
}

fn sign(claims: &Value, key: &str, kid: &str) -> String {
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some(kid.to_owned());
    jsonwebtoken::encode(&header, claims, &EncodingKey::from_rsa_pem(&key_pem(key)).expect("key"))
        .expect("sign")
}

fn unsigned(claims: &Value) -> String {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#);
    format!("{header}.{}.", URL_SAFE_NO_PAD.encode(claims.to_string()))
}

/// A POST of `tools/list` with a bearer token: the status, the challenge, the body.
async fn probe(url: &str, token: Option<&str>) -> (u16, String, String) {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("response");
    let status = response.status().as_u16();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (status, challenge, response.text().await.expect("body"))
}

#[tokio::test]
async fn oauth_access_tokens_are_checked_as_a_resource_server_checks_them() {
    let redis = RedisServer::start().expect("redis");
    let dir = scratch_dir("auth-jwt");
    let jwks_path = write(&dir, "jwks.json", &jwks(&[("issuer", "k1")]));
    let conveyor = Conveyor::up(
        &redis.url(),
        &[
            "--fixtures",
            "--jwt-issuer",
            ISSUER,
            "--jwks",
            jwks_path.to_str().expect("path"),
            "--resource-url",
            RESOURCE,
            "--jwt-scopes",
            "mcp",
            "--jwt-leeway-s",
            "5",
        ],
    )
    .expect("conveyor");
    let url = conveyor.mcp_url();

    // Without a token: 401, and the challenge points at the resource metadata.
    let (status, challenge, _) = probe(&url, None).await;
    assert_eq!(status, 401);
    let metadata_url = "https://conveyor.example.test/.well-known/oauth-protected-resource/mcp";
    assert!(challenge.contains(&format!("resource_metadata=\"{metadata_url}\"")), "{challenge}");
    assert!(challenge.contains("scope=\"mcp\""), "{challenge}");
    // The metadata (RFC 9728) names this resource and its authorization server.
    for path in ["/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"] {
        let metadata: Value = reqwest::get(format!("{}{path}", conveyor.base))
            .await
            .expect("metadata")
            .json()
            .await
            .expect("JSON");
        assert_eq!(metadata["resource"], RESOURCE, "{metadata}");
        assert_eq!(metadata["authorization_servers"], json!([ISSUER]), "{metadata}");
        assert_eq!(metadata["scopes_supported"], json!(["mcp"]), "{metadata}");
    }

    let good = sign(&claims("carol"), "issuer", "k1");
    let (status, _, body) = probe(&url, Some(&good)).await;
    assert_eq!(status, 200, "{body}");

    let mut refused = vec![];
    let mut expired = claims("carol");
    expired["exp"] = json!(now() - 60);
    refused.push(("expired", sign(&expired, "issuer", "k1"), 401, "invalid_token"));
    let mut early = claims("carol");
    early["nbf"] = json!(now() + 600);
    refused.push(("not yet valid", sign(&early, "issuer", "k1"), 401, "invalid_token"));
    let mut audience = claims("carol");
    audience["aud"] = json!("https://another.example.test/mcp");
    refused.push(("wrong audience", sign(&audience, "issuer", "k1"), 401, "invalid_token"));
    let mut issuer = claims("carol");
    issuer["iss"] = json!("https://evil.example.test");
    refused.push(("wrong issuer", sign(&issuer, "issuer", "k1"), 401, "invalid_token"));
    refused.push(("signed by another key", sign(&claims("carol"), "other", "k1"), 401, "invalid_token"));
    refused.push(("alg none", unsigned(&claims("carol")), 401, "invalid_token"));
    let mut tampered = good.clone();
    tampered.replace_range(tampered.len() - 4.., "AAAA");
    refused.push(("tampered signature", tampered, 401, "invalid_token"));
    // HS256 keyed with the public key: the classic algorithm confusion.
    let confused = jsonwebtoken::encode(
        &Header { kid: Some("k1".into()), ..Header::new(Algorithm::HS256) },
        &claims("carol"),
        &EncodingKey::from_secret(jwks(&[("issuer", "k1")]).as_bytes()).expect("HMAC key"),
    )
    .expect("sign");
    refused.push(("HS256", confused, 401, "invalid_token"));
    let mut scopeless = claims("carol");
    scopeless["scope"] = json!("other");
    refused.push(("missing scope", sign(&scopeless, "issuer", "k1"), 403, "insufficient_scope"));
    for (what, token, want_status, want_error) in refused {
        let (status, challenge, body) = probe(&url, Some(&token)).await;
        assert_eq!(status, want_status, "{what}: {body}");
        assert!(challenge.contains(&format!("error=\"{want_error}\"")), "{what}: {challenge}");
        assert!(challenge.contains("resource_metadata="), "{what}: {challenge}");
    }

    // The principal comes from `sub` (as `<issuer>#carol`): tasks are carol's, not dave's.
    let carol = Mcp::new(url.clone()).with_api_key(&good);
    let dave = Mcp::new(url.clone()).with_api_key(&sign(&claims("dave"), "issuer", "k1"));
    let task = start_slow_task(&carol).await;
    assert_eq!(
        dave.call_2025("tasks/get", json!({"taskId": task})).await.expect("get").error_code(),
        Some(-32602)
    );
    assert_eq!(
        carol.call_2025("tasks/cancel", json!({"taskId": task})).await.expect("cancel").result()["status"],
        "cancelled"
    );

    // The authorization server rotates its keys: a token with the new key id is accepted once
    // the gateway reads the key set again (at most every 10 s on an unknown key id).
    std::fs::write(&jwks_path, jwks(&[("issuer", "k1"), ("other", "k2")])).expect("rotate");
    let rotated = sign(&claims("carol"), "other", "k2");
    let deadline = std::time::Instant::now() + Duration::from_secs(25);
    loop {
        let (status, _, body) = probe(&url, Some(&rotated)).await;
        if status == 200 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the rotated key was never accepted: {body}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[test]
fn a_gateway_starts_only_with_authentication_or_an_explicit_no_auth() {
    let redis = RedisServer::start().expect("redis");
    let run = |args: &[&str]| {
        Command::new(conveyor_bin())
            .arg("gateway")
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .env("REDIS_URL", redis.url())
            .env_remove("CONVEYOR_NO_AUTH")
            .stdin(Stdio::null())
            .output()
            .expect("conveyor runs")
    };
    let output = run(&[]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--tokens-file") && stderr.contains("--no-auth"), "{stderr}");
    let dir = scratch_dir("auth-config");
    let tokens = tokens_file(&dir);
    let output = run(&["--no-auth", "--tokens-file", tokens.to_str().expect("path")]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("contradicts"));
    let bad = write(&dir, "bad.toml", "[[token]]\nprincipal = \"x\"\nsha256 = \"nothex\"\n");
    let output = run(&["--tokens-file", bad.to_str().expect("path")]);
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("64 hex"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );

    // `conveyor token new` prints an entry the gateway accepts, and the token it stands for.
    let made = Command::new(conveyor_bin())
        .args(["token", "new", "--principal", "erin", "--group", "ops"])
        .output()
        .expect("runs");
    assert!(made.status.success());
    let entry = String::from_utf8_lossy(&made.stdout).into_owned();
    let token = String::from_utf8_lossy(&made.stderr).lines().last().expect("token line").trim().to_owned();
    assert!(entry.contains("principal = \"erin\"") && entry.contains(&token_digest(&token)), "{entry}");
    assert!(!entry.contains(&token), "the file never holds the token itself");
}

/// Runs `conveyor gateway` with settings it must refuse: its standard error once it has exited.
/// A gateway that starts instead fails the test after 20 s.
async fn refused_at_start(redis: &RedisServer, args: &[&str], env: &[(&str, &str)]) -> String {
    let log = scratch_dir("auth-refused").join("gateway.log");
    let file = std::fs::File::create(&log).expect("log file");
    let mut child = Command::new(conveyor_bin())
        .arg("gateway")
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .env("REDIS_URL", redis.url())
        .env_remove("CONVEYOR_NO_AUTH")
        .env_remove("CONVEYOR_SIGNING_KEY")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(file)
        .spawn()
        .expect("conveyor runs");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let stderr = std::fs::read_to_string(&log).unwrap_or_default();
            assert!(!status.success(), "{args:?} must stop the gateway: {stderr}");
            return stderr;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the gateway started with {args:?}: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_key_set_url_must_be_https() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    let redis = RedisServer::start().expect("redis");
    // A key set served over plain http, which a gateway would read if it accepted the URL.
    let reads = Arc::new(AtomicUsize::new(0));
    let served = (reads.clone(), jwks(&[("issuer", "k1")]));
    let app = axum::Router::new().route(
        "/jwks.json",
        axum::routing::get(move || {
            let (reads, body) = served.clone();
            async move {
                reads.fetch_add(1, Ordering::SeqCst);
                body
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, app).await });

    for url in [format!("http://{address}/jwks.json"), format!("HTTP://{address}/jwks.json")] {
        let stderr = refused_at_start(
            &redis,
            &["--jwt-issuer", ISSUER, "--jwks", &url, "--resource-url", RESOURCE],
            &[],
        )
        .await;
        assert!(
            stderr.contains("CONVEYOR_JWKS") && stderr.contains("plain http") && stderr.contains("https://"),
            "{stderr}"
        );
    }
    let stderr = refused_at_start(
        &redis,
        &[],
        &[
            ("CONVEYOR_JWT_ISSUER", ISSUER),
            ("CONVEYOR_JWKS", &format!("http://{address}/jwks.json")),
            ("CONVEYOR_RESOURCE_URL", RESOURCE),
        ],
    )
    .await;
    assert!(stderr.contains("plain http"), "{stderr}");
    assert_eq!(reads.load(Ordering::SeqCst), 0, "nothing was read over plain http");
}

#[tokio::test]
async fn jwt_principals_and_groups_are_namespaced_by_issuer_unless_bare_principals_are_asked_for() {
    let redis = RedisServer::start().expect("redis");
    let dir = scratch_dir("auth-jwt-principals");
    let tokens = tokens_file(&dir);
    let jwks_path = write(&dir, "jwks.json", &jwks(&[("issuer", "k1")]));
    let access = write(
        &dir,
        "access.toml",
        &format!(
            "default = \"deny\"\n[[rule]]\ntools = [\"slow_compute\"]\nallow = [\"alice\", \"{ISSUER}#carol\"]\n\
             [[rule]]\ntools = [\"echo\"]\nallow = [\"group:research\"]\n\
             [[rule]]\ntools = [\"greet\"]\nallow = [\"group:{ISSUER}#research\"]\n"
        ),
    );
    let args = [
        "--tokens-file",
        tokens.to_str().expect("path"),
        "--jwt-issuer",
        ISSUER,
        "--jwks",
        jwks_path.to_str().expect("path"),
        "--resource-url",
        RESOURCE,
        "--access-file",
        access.to_str().expect("path"),
    ];
    let namespaced =
        Conveyor::up(&redis.url(), &[&["--fixtures"][..], &args[..]].concat()).expect("conveyor");
    let bare = Conveyor::gateway(&redis.url(), &[&args[..], &["--jwt-bare-principals"][..]].concat())
        .expect("gateway");
    let alice_jwt = sign(&claims("alice"), "issuer", "k1");
    let carol_jwt = sign(&claims("carol"), "issuer", "k1");
    let static_alice = Mcp::new(namespaced.mcp_url()).with_api_key(ALICE);
    let task = start_slow_task(&static_alice).await;
    let tools = |reply: conveyor_tests::mcp::Reply| -> Vec<String> {
        let mut names: Vec<String> = reply.result()["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("{}", reply.raw))
            .iter()
            .filter_map(|t| t["name"].as_str().map(str::to_owned))
            .collect();
        names.sort();
        names
    };

    // By default a token whose `sub` is alice is not the static token's alice: not her tasks,
    // not her rights; the access file names token principals as `<issuer>#<sub>`, and their
    // groups as `group:<issuer>#<group>`: the token's `research` is not the static tokens'.
    assert_eq!(
        tools(static_alice.call_2025("tools/list", json!({})).await.expect("list")),
        ["echo", "slow_compute"]
    );
    let alice = Mcp::new(namespaced.mcp_url()).with_api_key(&alice_jwt);
    let reply = alice.call_2025("tasks/get", json!({"taskId": task})).await.expect("get");
    assert_eq!(reply.error_code(), Some(-32602), "{}", reply.raw);
    assert_eq!(alice.call_2025("tasks/list", json!({})).await.expect("list").result()["tasks"], json!([]));
    assert_eq!(tools(alice.call_2025("tools/list", json!({})).await.expect("list")), ["greet"]);
    let carol = Mcp::new(namespaced.mcp_url()).with_api_key(&carol_jwt);
    assert_eq!(
        tools(carol.call_2025("tools/list", json!({})).await.expect("list")),
        ["greet", "slow_compute"]
    );
    let log = namespaced.log_text();
    assert!(
        log.lines().any(|l| l.contains("conveyor::audit") && l.contains(&format!("{ISSUER}#alice"))),
        "the audit log names the token's principal with its issuer: {log}"
    );

    // With --jwt-bare-principals the claim alone is the principal, and the group alone the group.
    let alice = Mcp::new(bare.mcp_url()).with_api_key(&alice_jwt);
    let reply = alice.call_2025("tasks/get", json!({"taskId": task})).await.expect("get");
    assert_eq!(reply.result()["status"], "working", "{}", reply.raw);
    assert_eq!(
        tools(alice.call_2025("tools/list", json!({})).await.expect("list")),
        ["echo", "slow_compute"]
    );
    let carol = Mcp::new(bare.mcp_url()).with_api_key(&carol_jwt);
    assert_eq!(tools(carol.call_2025("tools/list", json!({})).await.expect("list")), ["echo"]);
    assert!(bare.log_text().contains("--jwt-bare-principals with a tokens file"), "{}", bare.log_text());

    let cancelled = static_alice.call_2025("tasks/cancel", json!({"taskId": task})).await.expect("cancel");
    assert_eq!(cancelled.result()["status"], "cancelled", "{}", cancelled.raw);
}

#[tokio::test]
async fn placeholder_and_guessable_signing_keys_stop_the_gateway_at_start() {
    let redis = RedisServer::start().expect("redis");
    // The example Kubernetes secret's value, as an operator who forgot to replace it would run.
    let secret_yaml =
        std::fs::read_to_string(workspace_root().join("deploy/k8s/secret.yaml")).expect("secret.yaml");
    let example = secret_yaml
        .lines()
        .find_map(|l| l.trim().strip_prefix("CONVEYOR_SIGNING_KEY:"))
        .expect("a signing key in the example secret")
        .trim()
        .trim_matches('"')
        .to_owned();
    let stderr = refused_at_start(&redis, &["--no-auth"], &[("CONVEYOR_SIGNING_KEY", &example)]).await;
    assert!(stderr.contains("CONVEYOR_SIGNING_KEY") && stderr.contains("openssl rand -hex 32"), "{stderr}");
    assert!(!stderr.contains(&example), "the key is not repeated in the log: {stderr}");
    let repeated = "0123456789abcdef".repeat(4);
    let stderr = refused_at_start(&redis, &["--no-auth", "--signing-key", &repeated], &[]).await;
    assert!(stderr.contains("repeats a pattern") && stderr.contains("openssl rand -hex 32"), "{stderr}");

    // What `openssl rand -hex 32` prints starts a gateway.
    let key = format!("{}{}", conveyor_shared::model::random_id(), conveyor_shared::model::random_id());
    let gateway =
        Conveyor::with_env("gateway", &redis.url(), &["--no-auth"], &[("CONVEYOR_SIGNING_KEY", &key)])
            .expect("a gateway with a random key");
    assert_eq!(Mcp::new(gateway.mcp_url()).get_status("/healthz").await.expect("healthz"), 200);
}

#[tokio::test]
async fn a_line_break_in_a_tokens_header_does_not_start_a_log_line() {
    let redis = RedisServer::start().expect("redis");
    let dir = scratch_dir("auth-jwt-forged-log");
    let jwks_path = write(&dir, "jwks.json", &jwks(&[("issuer", "k1")]));
    let conveyor = Conveyor::gateway(
        &redis.url(),
        &["--jwt-issuer", ISSUER, "--jwks", jwks_path.to_str().expect("path"), "--resource-url", RESOURCE],
    )
    .expect("gateway");
    // The header's algorithm is not one there is: its error quotes it, line break and all.
    let forged = "RS256\n1999-01-01T00:00:00.000000Z  INFO conveyor::audit: event=\"granted\" principal=\"root\"\u{1b}[2K";
    let header = URL_SAFE_NO_PAD.encode(json!({"alg": forged, "typ": "JWT", "kid": "k1"}).to_string());
    let token = format!("{header}.{}.c2ln", URL_SAFE_NO_PAD.encode(claims("carol").to_string()));
    let (status, _, body) = probe(&conveyor.mcp_url(), Some(&token)).await;
    assert_eq!(status, 401, "{body}");
    let log = conveyor.log_text();
    let line = log
        .lines()
        .find(|l| l.contains("not authenticated") && l.contains("1999-01-01"))
        .unwrap_or_else(|| panic!("the refusal is logged with the header's text:\n{log}"));
    assert!(line.contains(r"RS256\n1999-01-01T00:00:00.000000Z"), "kept, escaped: {line}");
    assert!(!log.lines().any(|l| l.starts_with("1999-01-01")), "no forged line:\n{log}");
    assert!(!log.contains('\u{1b}'), "no terminal control reaches the log");
}
