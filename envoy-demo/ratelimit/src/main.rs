//! ratelimit-service: Envoy's RateLimitService (gRPC `ShouldRateLimit`) counting in Redis through
//! Kuadrant's limitador library. See docs/ratelimit-service.md.

mod limits;
mod service;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use limitador::storage::redis::AsyncRedisStorage;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::net::TcpListener;

/// Envoy's RateLimitService (envoy.service.ratelimit.v3) on limitador with Redis storage: every
/// instance on the same Redis shares the counts.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// Address to serve gRPC on (port 0: any free port; the bound address is printed).
    #[arg(long, default_value = "127.0.0.1:8081")]
    listen: SocketAddr,
    /// Redis holding the counters.
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// Limits in Limitador's limits-file format (YAML). Without it, every descriptor must carry
    /// its own `limit` override (a request's domain without limits is refused).
    #[arg(long)]
    limits: Option<PathBuf>,
    /// Check the limits file and exit.
    #[arg(long, requires = "limits")]
    check: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RATELIMIT_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .init();
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ratelimit-service: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    let limits = match &args.limits {
        Some(path) => limits::load(path)?,
        None => Vec::new(),
    };
    if args.check {
        println!("{} limits: ok", limits.len());
        return Ok(());
    }
    let storage = redis_storage(&args.redis)
        .await
        .map_err(|e| format!("--redis {}: {e}", args.redis))?;
    let limiter = Arc::new(service::Limiter::new(limits, Box::new(storage)));
    let listener = TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("--listen {}: {e}", args.listen))?;
    let bound = listener
        .local_addr()
        .map_err(|e| format!("--listen {}: {e}", args.listen))?;
    println!("listening on {bound}");
    tonic::transport::Server::builder()
        .add_service(RateLimitServiceServer::new(service::Service(limiter)))
        .serve_with_incoming_shutdown(
            tokio_stream::wrappers::TcpListenerStream::new(listener),
            shutdown(),
        )
        .await
        .map_err(|e| format!("serving on {bound}: {e}"))
}

/// limitador's Redis storage on a connection that answers within a second or fails, and that
/// retries a lost connection once, a quarter second later, and again on the next call (redis 0.27's defaults wait up to a minute
/// between attempts, and forever for an answer).
async fn redis_storage(url: &str) -> Result<AsyncRedisStorage, redis::RedisError> {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Duration::from_secs(1))
        .set_response_timeout(Duration::from_secs(1))
        .set_factor(2)
        .set_max_delay(250)
        .set_number_of_retries(1);
    let manager = ConnectionManager::new_with_config(redis::Client::open(url)?, config).await?;
    AsyncRedisStorage::new_with_conn_manager(manager).await
}

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = term => {},
        _ = tokio::signal::ctrl_c() => {},
    }
}
