//! How `quantykube admin` prints resources: a table for people, or the resource's
//! protobuf JSON mapping (with the .proto's field names) as JSON or YAML for programs.
//! A list prints as `{"members": [...]}` (or `snapshots`), one resource as itself.

use std::io::Write;

use prost::Message;
use prost_reflect::{DynamicMessage, SerializeOptions};

use super::{Exit, Failure, Format};
use crate::proto::admin_v1::{Member, Snapshot};

pub(super) fn members(members: &[Member], format: Format, list: bool) -> Result<(), Failure> {
    if format == Format::Table {
        let mut rows = vec![row(&[
            "NAME",
            "ID",
            "STATE",
            "LEADER",
            "STARTED",
            "PEER URLS",
            "CLIENT URLS",
            "VERSION",
            "APPLIED",
            "LAG",
            "DB SIZE",
        ])];
        for member in members {
            let meta = member.metadata.clone().unwrap_or_default();
            let status = member.status.clone().unwrap_or_default();
            let reachable = |value: String| if status.reachable { value } else { "-".into() };
            rows.push(vec![
                meta.name,
                format!("{:x}", status.id),
                state_name(status.state().as_str_name(), "MEMBER_STATE_"),
                yes_no(status.leader),
                yes_no(status.started),
                member.peer_urls.join(","),
                status.client_urls.join(","),
                reachable(status.version.clone()),
                reachable(status.applied_index.to_string()),
                reachable(status.lag.to_string()),
                reachable(status.db_size.to_string()),
            ]);
        }
        return print(&table(&rows));
    }
    structured(
        members,
        "quantykube.admin.v1.Member",
        "members",
        format,
        list,
    )
}

pub(super) fn snapshots(snapshots: &[Snapshot], format: Format, list: bool) -> Result<(), Failure> {
    if format == Format::Table {
        let mut rows = vec![row(&[
            "NAME", "STATE", "REVISION", "SIZE", "MEMBER", "SHA256", "CREATED",
        ])];
        for snapshot in snapshots {
            let meta = snapshot.metadata.clone().unwrap_or_default();
            let status = snapshot.status.clone().unwrap_or_default();
            rows.push(vec![
                meta.name,
                state_name(status.state().as_str_name(), "SNAPSHOT_STATE_"),
                status.revision.to_string(),
                status.size.to_string(),
                status.member.map(|m| m.name).unwrap_or_default(),
                status.sha256,
                meta.create_time
                    .map(|t| t.seconds.to_string())
                    .unwrap_or_default(),
            ]);
        }
        return print(&table(&rows));
    }
    structured(
        snapshots,
        "quantykube.admin.v1.Snapshot",
        "snapshots",
        format,
        list,
    )
}

fn row(cells: &[&str]) -> Vec<String> {
    cells.iter().map(|c| c.to_string()).collect()
}

fn yes_no(value: bool) -> String {
    if value { "yes" } else { "no" }.to_string()
}

fn state_name(name: &str, prefix: &str) -> String {
    name.strip_prefix(prefix)
        .unwrap_or(name)
        .to_ascii_lowercase()
}

/// Columns padded to their widest cell, two spaces apart.
fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .map(|r| r.get(c).map_or(0, |s| s.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

fn structured<M: Message>(
    items: &[M],
    message: &str,
    plural: &str,
    format: Format,
    list: bool,
) -> Result<(), Failure> {
    let failed = |what: String| Failure {
        exit: Exit::Failed,
        message: what,
    };
    let descriptor = crate::proto::descriptors()
        .get_message_by_name(message)
        .ok_or_else(|| failed(format!("no descriptor for {message}")))?;
    let options = SerializeOptions::new().use_proto_field_name(true);
    let mut values = Vec::new();
    for item in items {
        let dynamic = DynamicMessage::decode(descriptor.clone(), item.encode_to_vec().as_slice())
            .map_err(|e| failed(e.to_string()))?;
        let value = dynamic
            .serialize_with_options(serde_json::value::Serializer, &options)
            .map_err(|e| failed(e.to_string()))?;
        values.push(value);
    }
    let value = match (list, values.pop()) {
        (false, Some(one)) if values.is_empty() => one,
        (_, last) => {
            values.extend(last);
            serde_json::json!({ plural: values })
        }
    };
    let text = match format {
        Format::Yaml => serde_yaml_ng::to_string(&value).map_err(|e| failed(e.to_string()))?,
        _ => {
            let mut text =
                serde_json::to_string_pretty(&value).map_err(|e| failed(e.to_string()))?;
            text.push('\n');
            text
        }
    };
    print(&text)
}

fn print(text: &str) -> Result<(), Failure> {
    std::io::stdout()
        .lock()
        .write_all(text.as_bytes())
        .map_err(|e| Failure {
            exit: Exit::Failed,
            message: format!("stdout: {e}"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_pad_columns() {
        let rows = vec![row(&["NAME", "ID"]), row(&["m-long", "1"])];
        assert_eq!(table(&rows), "NAME    ID\nm-long  1\n");
    }
}
