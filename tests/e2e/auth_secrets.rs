//! No secret in the members' logs (issue 17): every path a password or a token takes
//! (user add, change password, authenticate right and wrong, tokens used on every
//! member, malformed and unknown tokens, a snapshot of the data) runs on three members
//! logging at debug level, and then their logs are searched for each secret.
//!
//! Written against etcd 3.4.23 first (`QK_TEST_TARGET=etcd`): etcd never logs a
//! password either, but it logs simple tokens at debug level (`authenticated a user`,
//! with the token) and every invalid token it is sent at warn level, so for etcd only
//! the passwords are asserted.

use etcd_client::Permission;

use crate::auth_support::{enable_auth, root_client, Rpc};
use crate::harness::{Cluster, ClusterOptions, Target};
use crate::support::connect::Connect;

const PASSWORD: &str = "Pw-first-7f3a9c-SECRET";
const NEW_PASSWORD: &str = "Pw-second-d81e44-SECRET";
const WRONG_PASSWORD: &str = "Pw-wrong-55b0aa-SECRET";
const FORGED_TOKEN: &str = "ForgedTokenValueQq.123456";

#[tokio::test]
async fn auth_secrets_never_reach_the_logs() {
    let cluster = Cluster::start_with(ClusterOptions::new(3).args(["--log-level", "debug"])).await;
    enable_auth(&cluster).await;
    let root = root_client(&cluster, 0).await;
    let mut auth = root.auth_client();
    auth.role_add("s").await.expect("role add");
    auth.role_grant_permission("s", Permission::read_write("s/").with_prefix())
        .await
        .expect("grant");
    auth.user_add("sam", PASSWORD, None)
        .await
        .expect("user add");
    auth.user_grant_role("sam", "s").await.expect("grant role");

    let mut tokens = Vec::new();
    for i in 0..3 {
        let mut rpc = Rpc::connect(&cluster.endpoint(i)).await;
        let token = rpc
            .authenticate("sam", PASSWORD)
            .await
            .expect("authenticate");
        // Used on every member, allowed and denied.
        for j in 0..3 {
            let mut on = Rpc::connect(&cluster.endpoint(j))
                .await
                .with_token(Some(&token));
            on.put(crate::raw::put("s/k", "v")).await.expect("put");
            assert!(on.put(crate::raw::put("other", "v")).await.is_err());
        }
        assert!(rpc.authenticate("sam", WRONG_PASSWORD).await.is_err());
        tokens.push(token);
    }
    let mut forged = Rpc::connect(&cluster.endpoint(1))
        .await
        .with_token(Some(FORGED_TOKEN));
    assert!(forged.put(crate::raw::put("s/k", "v")).await.is_err());
    auth.user_change_password("sam", NEW_PASSWORD)
        .await
        .expect("change password");
    let mut sam = Connect::new()
        .user("sam", NEW_PASSWORD)
        .try_to([cluster.endpoint(2)])
        .await
        .expect("log in with the new password");
    sam.put("s/after", "v", None).await.expect("put");
    // An old token after the password changed: refused, and not logged either.
    let mut stale = Rpc::connect(&cluster.endpoint(0))
        .await
        .with_token(Some(&tokens[0]));
    assert!(stale.put(crate::raw::put("s/k", "v")).await.is_err());

    let mut secrets: Vec<&str> = vec![PASSWORD, NEW_PASSWORD, WRONG_PASSWORD];
    if cluster.target() == Target::Quantykube {
        secrets.push(FORGED_TOKEN);
        secrets.extend(tokens.iter().map(String::as_str));
        // The random part alone, whatever surrounds it.
        secrets.extend(
            tokens
                .iter()
                .filter_map(|t| t.split_once('.'))
                .map(|(p, _)| p),
        );
    }
    for i in 0..3 {
        let log = std::fs::read_to_string(cluster.log_path(i)).expect("member log");
        assert!(log.len() > 1000, "member {i} logged at debug level");
        for secret in &secrets {
            assert!(
                !log.contains(secret),
                "member {i}'s log holds a secret ({} bytes long, starting {:?})",
                secret.len(),
                &secret[..4]
            );
        }
    }
}
