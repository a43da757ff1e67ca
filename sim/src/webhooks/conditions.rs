//! A webhook's `matchConditions`: CEL expressions over `object`, `oldObject` and `request`, evaluated with the
//! cel-interpreter crate. Compiled when a configuration is written (a condition that does not compile makes the
//! configuration invalid, as kube-apiserver's validation does) and again on each evaluation: configurations are
//! few and small, so no cache to keep consistent with updates.

use cel_interpreter::{Context, Program, Value as Cel};
use serde_json::Value;
use std::collections::HashMap;

/// What the conditions of one webhook decided.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every condition is true (or there are none): call the webhook.
    Call,
    /// Some condition is false: skip the webhook, whatever else errored.
    Skip { condition: String },
    /// No condition is false but some could not be evaluated: the failurePolicy decides.
    Error(String),
}

/// Checks that every `matchConditions[].expression` of every webhook compiles; the error names the field.
pub fn validate(webhooks: &[Value]) -> Result<(), (String, String)> {
    for (hook_index, hook) in webhooks.iter().enumerate() {
        for (index, condition) in hook["matchConditions"].as_array().into_iter().flatten().enumerate() {
            let field = format!("webhooks[{hook_index}].matchConditions[{index}].expression");
            let expression = condition["expression"].as_str().unwrap_or("");
            if expression.is_empty() {
                return Err((field, "Required value".into()));
            }
            if let Err(error) = Program::compile(expression) {
                return Err((field, format!("Invalid value: {expression:?}: compilation failed: {error}")));
            }
        }
    }
    Ok(())
}

/// Evaluates `conditions` (a webhook's `matchConditions`) over the request. As kube-apiserver: any false wins
/// over errors, which win over true.
pub fn evaluate(conditions: &[Value], object: &Value, old_object: &Value, request: &Value) -> Outcome {
    if conditions.is_empty() {
        return Outcome::Call;
    }
    let mut context = Context::default();
    context.add_variable_from_value("object", to_cel(object));
    context.add_variable_from_value("oldObject", to_cel(old_object));
    context.add_variable_from_value("request", to_cel(request));
    let mut errors = Vec::new();
    for condition in conditions {
        let name = condition["name"].as_str().unwrap_or("").to_string();
        let expression = condition["expression"].as_str().unwrap_or("");
        let result = Program::compile(expression)
            .map_err(|error| format!("compilation failed: {error}"))
            .and_then(|program| program.execute(&context).map_err(|error| error.to_string()));
        match result {
            Ok(Cel::Bool(true)) => {}
            Ok(Cel::Bool(false)) => return Outcome::Skip { condition: name },
            Ok(other) => errors.push(format!("expression '{expression}' resulted in error: expected a boolean, got {:?}", other.type_of())),
            Err(error) => errors.push(format!("expression '{expression}' resulted in error: {error}")),
        }
    }
    match errors.len() {
        0 => Outcome::Call,
        // Go's aggregate error: one error reads as itself, several as a bracketed list.
        1 => Outcome::Error(errors.remove(0)),
        _ => Outcome::Error(format!("[{}]", errors.join(", "))),
    }
}

/// JSON as CEL sees Kubernetes objects: integers are `int` (never `uint`, which serde's unsigned numbers would
/// give and which does not compare equal to an `int` literal), other numbers `double`.
fn to_cel(value: &Value) -> Cel {
    match value {
        Value::Null => Cel::Null,
        Value::Bool(value) => Cel::Bool(*value),
        Value::Number(number) => match number.as_i64() {
            Some(int) => Cel::Int(int),
            None => Cel::Float(number.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(text) => Cel::from(text.as_str()),
        Value::Array(items) => Cel::from(items.iter().map(to_cel).collect::<Vec<Cel>>()),
        Value::Object(map) => Cel::from(map.iter().map(|(key, value)| (key.clone(), to_cel(value))).collect::<HashMap<String, Cel>>()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conditions(expressions: &[&str]) -> Vec<Value> {
        expressions.iter().enumerate().map(|(index, expression)| json!({"name": format!("c{index}"), "expression": expression})).collect()
    }

    #[test]
    fn false_wins_over_errors_and_errors_over_true() {
        let pod = json!({"metadata": {"name": "x", "labels": {"app": "web"}}, "spec": {"priority": 3}});
        let request = json!({"operation": "CREATE", "userInfo": {"username": "u"}});
        let outcome = |expressions: &[&str]| evaluate(&conditions(expressions), &pod, &Value::Null, &request);
        assert_eq!(outcome(&["object.metadata.labels.app == 'web'", "request.operation == 'CREATE'", "object.spec.priority == 3"]), Outcome::Call);
        assert_eq!(outcome(&["oldObject == null", "object.metadata.name == 'y'"]), Outcome::Skip { condition: "c1".into() });
        assert_eq!(outcome(&["object.missing.field == 1", "false"]), Outcome::Skip { condition: "c1".into() });
        assert!(matches!(outcome(&["object.missing.field == 1", "true"]), Outcome::Error(message) if message.contains("object.missing.field")));
        assert!(matches!(outcome(&["'text'"]), Outcome::Error(message) if message.contains("expected a boolean")));
    }

    #[test]
    fn expressions_that_do_not_compile_are_invalid() {
        let webhooks = vec![json!({"name": "a", "matchConditions": [{"name": "ok", "expression": "true"}, {"name": "bad", "expression": "object.("}]})];
        let (field, _) = validate(&webhooks).unwrap_err();
        assert_eq!(field, "webhooks[0].matchConditions[1].expression");
    }
}
